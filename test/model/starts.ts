import type { AttributeValue, DynamoDBClient } from "@aws-sdk/client-dynamodb";
import type { FinalizeRequestMiddleware, MetadataBearer } from "@smithy/types";

/**
 * Every start write of a run (`startRun`: `fence = fence + 1`) sent to DynamoDB, with the run as
 * it stood just before: what the model checks the lease rule on (docs/architecture.md, "Storage
 * operations", run-start.ts). A start held unwritten (`takeRun`) is carried by the run's first
 * write and only ever takes a run never started (fence 0), so it has no earlier holder to check.
 */
export interface StartRecord {
  readonly runId: string;
  /** Whether DynamoDB applied it: a start refused on its condition is logged too (applied false). */
  readonly applied: boolean;
  /** The start's instant (its `:now`). */
  readonly at: string;
  readonly workerId: string;
  /** The fence this start took: the one before plus one. */
  readonly fence: number;
  /** The run just before the start (a consistent read after any hook, right before the write). */
  readonly before: {
    readonly status: string;
    readonly fence: number;
    readonly leaseUntil: string | null;
    readonly workerId: string | null;
  };
}

type Marshalled = Record<string, AttributeValue>;

interface StartRequest {
  readonly TableName?: string;
  readonly Key?: Marshalled;
  readonly UpdateExpression?: string;
  readonly ExpressionAttributeValues?: Marshalled;
}

const text = (value: AttributeValue | undefined): string | null =>
  value !== undefined && "S" in value && typeof value.S === "string" ? value.S : null;
const number = (value: AttributeValue | undefined): number =>
  value !== undefined && "N" in value && typeof value.N === "string" ? Number(value.N) : 0;

/**
 * Logs each applied start write of a run into the current sequence's `starts`. Installed after the
 * fault middleware, so it sits inside it: a start hook has run, and an injected crash after the
 * start or a lost answer comes after the start is logged (the SDK's resend then fails its own
 * condition and logs nothing). `read` reads a run item consistently (null: none).
 */
export function installStartLog(
  client: DynamoDBClient,
  current: () => {
    readonly runsTable: string;
    readonly starts: StartRecord[];
    readonly read: (key: Marshalled) => Promise<Marshalled | null>;
  } | null,
): void {
  const middleware: FinalizeRequestMiddleware<object, MetadataBearer> =
    (next, context) => async (args) => {
      const state = current();
      const input = args.input as StartRequest;
      const isStart =
        state !== null &&
        context.commandName === "UpdateItemCommand" &&
        input.TableName === state.runsTable &&
        input.Key !== undefined &&
        /fence = fence \+/.test(input.UpdateExpression ?? "");
      if (!isStart || input.Key === undefined) return next(args);
      const key = input.Key;
      const before = await state.read(key);
      const values = input.ExpressionAttributeValues ?? {};
      const fenceBefore = number(before?.fence);
      const log = (applied: boolean) =>
        state.starts.push({
          runId: text(before?.runId) ?? `${text(key.pk)} ${text(key.sk)}`,
          applied,
          at: text(values[":now"]) ?? "",
          workerId: text(values[":workerId"]) ?? "",
          fence: fenceBefore + 1,
          before: {
            status: text(before?.status) ?? "MISSING",
            fence: fenceBefore,
            leaseUntil: text(before?.leaseUntil),
            workerId: text(before?.workerId),
          },
        });
      try {
        const result = await next(args);
        log(true);
        return result;
      } catch (error) {
        log(false);
        throw error;
      }
    };
  client.middlewareStack.add(middleware, {
    step: "finalizeRequest",
    priority: "low",
    name: "modelStartLog",
  });
}
