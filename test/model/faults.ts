import { AsyncLocalStorage } from "node:async_hooks";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import {
  type AttributeValue,
  InternalServerError,
  TransactionCanceledException,
  TransactionConflictException,
} from "@aws-sdk/client-dynamodb";
import type { FinalizeRequestMiddleware, MetadataBearer } from "@smithy/types";

/**
 * Faults the emulators cannot produce, injected with SDK middleware on the
 * real DynamoDB client: DynamoDB Local serializes transactions, so it never
 * cancels one with TransactionConflict, and a process cannot be killed between
 * two of its own writes without a seam. The middleware sits inside the SDK's
 * retry loop, where a real service error would surface.
 */

/** The writes the model tells apart, by the shape of their request. */
export type WriteKind =
  | "claim"
  | "finish"
  | "edit"
  | "admission"
  | "start"
  /**
   * A run's own ending write (a failure's comes after its next attempt's put, so a crash before it
   * leaves that attempt waiting): only ever crashed before, not conflicted.
   */
  | "runEnd"
  /** A dead letter's replay: the transaction that puts the new run and marks the dead one replayed. */
  | "replay"
  | "other";

/** What the model may lose answers of: a kind of write, or any write an API request makes. */
export type LostKind = WriteKind | "api";

/** Where a worker dies: right after its start write, before its finishing write, or between the run's and the job's write. */
export type CrashPoint = "afterStart" | "beforeFinish" | "betweenWrites";

export class InjectedCrash extends Error {
  override readonly name = "InjectedCrash";
}

/** One worker delivery, as the fault middleware sees it. */
export interface DeliveryContext {
  readonly crash: CrashPoint | null;
  /** Set once the run's finishing write has gone through, for `betweenWrites`. */
  runWritten: boolean;
  crashed: boolean;
  /** The process was killed: every further request of this delivery fails. */
  killed: boolean;
}

const delivery = new AsyncLocalStorage<DeliveryContext>();
const apiRequest = new AsyncLocalStorage<true>();

/** Runs `work` as one API request: its writes are of kind `api` for losing their answers. */
export function inApiRequest<T>(work: () => Promise<T>): Promise<T> {
  return apiRequest.run(true, work);
}

export function newDelivery(crash: CrashPoint | null): DeliveryContext {
  return { crash, runWritten: false, crashed: false, killed: false };
}

/** Runs `work` as one worker delivery, which dies as its context says. */
export function inDelivery<T>(context: DeliveryContext, work: () => Promise<T>): Promise<T> {
  return delivery.run(context, work);
}

/** Whether the delivery this call belongs to has died: a dead process sends nothing more (to SQS either). */
export function deliveryDied(): boolean {
  const context = delivery.getStore();
  return context !== undefined && (context.crashed || context.killed);
}

/** Runs `work` outside any delivery: an API call made by a hook must not inherit the worker's crash. */
function outsideDelivery<T>(work: () => Promise<T>): Promise<T> {
  return delivery.exit(work);
}

type Hook = () => Promise<void>;

export interface FaultPlan {
  /** Cancellations still to inject per kind of write. */
  readonly conflicts: Map<WriteKind, number>;
  /**
   * Writes still to apply with their answer lost, per kind: DynamoDB applies the write, and the
   * SDK sees a 500 in its retry loop and sends the request again, as after a dropped connection.
   */
  readonly lostAnswers: Map<LostKind, number>;
  /**
   * Runs once, between the read and the write of the next claim of this job: it starts just
   * before that claim's transaction is sent, and its own claims of the job wait until then.
   */
  claimHook: { readonly jobId: string; readonly run: Hook } | null;
  /** The claims of a change interleaved with a claim wait here for that claim's write. */
  heldClaim: {
    readonly jobId: string;
    readonly reached: () => void;
    readonly released: Promise<void>;
  } | null;
  /** Runs once, just before the next start write of a run of this job is sent. */
  startHook: { readonly jobId: string; readonly run: Hook } | null;
  /** Runs once, just before the next replay's transaction is sent: after the replay read the dead run and its job. */
  replayHook: { readonly run: Hook } | null;
  /** Every cancellation injected, for the report. */
  readonly injected: { kind: WriteKind; at: string }[];
  /** Every answer lost, for the report and for judging a 5xx answered after one. */
  readonly lost: { kind: LostKind; at: string }[];
}

export function emptyFaultPlan(): FaultPlan {
  return {
    conflicts: new Map(),
    lostAnswers: new Map(),
    claimHook: null,
    heldClaim: null,
    startHook: null,
    replayHook: null,
    injected: [],
    lost: [],
  };
}

type Marshalled = Record<string, AttributeValue>;

interface WriteRequest {
  readonly TableName?: string;
  readonly Key?: Marshalled;
  readonly UpdateExpression?: string;
  readonly ConditionExpression?: string;
}

interface TransactRequest {
  readonly TransactItems?: readonly {
    readonly Update?: WriteRequest;
    readonly Delete?: WriteRequest;
    readonly Put?: WriteRequest & { readonly Item?: Marshalled };
    readonly ConditionCheck?: WriteRequest;
  }[];
}

type DynamoInput = WriteRequest & TransactRequest;

const text = (value: AttributeValue | undefined): string =>
  value !== undefined && "S" in value && typeof value.S === "string" ? value.S : "";

export interface Tables {
  readonly jobs: string;
  readonly runs: string;
}

/** What kind of write a request is, and the job it touches. */
function classify(input: DynamoInput, tables: Tables): { kind: WriteKind; jobId: string } {
  const items = input.TransactItems;
  if (items !== undefined) {
    const jobOf = (key: Marshalled | undefined) => {
      const pk = text(key?.pk);
      return pk.startsWith("JOB#") ? pk.slice(4) : "";
    };
    const jobId =
      items.map((i) => jobOf((i.Update ?? i.Delete ?? i.ConditionCheck)?.Key)).find(Boolean) ?? "";
    const first = items[0]?.Update;
    if (first?.TableName === tables.runs && first.UpdateExpression?.includes("finishedAt"))
      return { kind: "finish", jobId: jobOf(first.Key) };
    if (items.some((i) => /version = version \+/.test(i.Update?.UpdateExpression ?? "")))
      return { kind: "edit", jobId };
    const claims = items.some(
      (i) => text(i.Delete?.Key?.pk).startsWith("DUE#") && i.Delete?.ConditionExpression,
    );
    if (claims) {
      // The due entry's sort key names the job even when the claim does not update it (a retry).
      const entry = items.find((i) => text(i.Delete?.Key?.pk).startsWith("DUE#"))?.Delete?.Key;
      return { kind: "claim", jobId: jobId || (text(entry?.sk).split("#")[1] ?? "") };
    }
    if (items.some((i) => i.Update?.UpdateExpression?.includes("replayedBy")))
      return { kind: "replay", jobId };
    return { kind: "other", jobId };
  }
  const key = input.Key;
  if (input.UpdateExpression !== undefined && key !== undefined) {
    const pk = text(key.pk);
    const jobId = pk.startsWith("JOB#") ? pk.slice(4) : "";
    if (
      input.TableName === tables.jobs &&
      input.ConditionExpression?.includes("activeRevision = :")
    )
      return { kind: "admission", jobId };
    if (input.TableName === tables.runs && /fence = fence \+/.test(input.UpdateExpression))
      return { kind: "start", jobId };
    if (input.TableName === tables.runs && input.UpdateExpression.includes("finishedAt"))
      return { kind: "runEnd", jobId };
    // The job's write after a run ended: it meets claims on the job item.
    if (input.TableName === tables.jobs && /lastRun|REMOVE activeRuns/.test(input.UpdateExpression))
      return { kind: "finish", jobId };
  }
  return { kind: "other", jobId: "" };
}

const metadata = { httpStatusCode: 400, attempts: 1, totalRetryDelay: 0 };

/** The requests that write: only these can be applied with their answer lost. */
/**
 * Requests whose answer was lost once: the SDK's resend of one gets its answer, so the caller
 * meets its own applied write rather than an SDK that gives up (a 500 the caller cannot tell
 * from a write not made).
 */
const answerLost = new WeakSet<object>();

const WRITES = new Set([
  "PutItemCommand",
  "UpdateItemCommand",
  "DeleteItemCommand",
  "TransactWriteItemsCommand",
  "BatchWriteItemCommand",
]);

function conflictFor(input: DynamoInput, tables: Tables): Error {
  const items = input.TransactItems;
  if (items === undefined) {
    return new TransactionConflictException({
      message: "Transaction is ongoing for the item",
      $metadata: metadata,
    });
  }
  // The conflict is reported on the item another transaction holds: the job, else the first.
  const jobIndex = items.findIndex(
    (i) => i.Update?.TableName === tables.jobs && text(i.Update.Key?.pk).startsWith("JOB#"),
  );
  const at = Math.max(jobIndex, 0);
  const reasons = items.map((_, i) =>
    i === at
      ? { Code: "TransactionConflict", Message: "Transaction is ongoing for the item" }
      : { Code: "None" },
  );
  return new TransactionCanceledException({
    message: `Transaction cancelled, please refer cancellation reasons for specific reasons [${reasons.map((r) => r.Code).join(", ")}]`,
    $metadata: metadata,
    CancellationReasons: reasons,
  });
}

/**
 * Installs the fault middleware on a client. `plan()` gives the current
 * sequence's plan and tables (null: pass everything through).
 */
export function installDynamoFaults(
  client: DynamoDBClient,
  current: () => { plan: FaultPlan; tables: Tables; now: () => string } | null,
): void {
  const middleware: FinalizeRequestMiddleware<object, MetadataBearer> =
    (next, context) => async (args) => {
      const state = current();
      if (state === null) return next(args);
      const input = args.input as DynamoInput;
      const { kind, jobId } = classify(input, state.tables);
      const { plan } = state;
      const crash = delivery.getStore();
      if (crash?.killed) throw new InjectedCrash("the worker's process was killed");

      const held = plan.heldClaim;
      if (kind === "claim" && held && held.jobId === jobId) {
        // The interleaved change's own claim of the entry comes after the claim it interrupted.
        held.reached();
        await held.released;
      }
      let interleaved: Promise<void> | null = null;
      let releaseHeld = () => {};
      if (kind === "claim" && plan.claimHook && plan.claimHook.jobId === jobId) {
        const hook = plan.claimHook;
        plan.claimHook = null;
        let reached = () => {};
        const reachedClaim = new Promise<void>((resolve) => {
          reached = resolve;
        });
        const released = new Promise<void>((resolve) => {
          releaseHeld = resolve;
        });
        plan.heldClaim = { jobId, reached, released };
        interleaved = outsideDelivery(hook.run);
        await Promise.race([interleaved, reachedClaim]);
      }
      try {
        if (kind === "start" && plan.startHook && plan.startHook.jobId === jobId) {
          const hook = plan.startHook;
          plan.startHook = null;
          await outsideDelivery(hook.run);
        }
        if (kind === "replay" && plan.replayHook) {
          const hook = plan.replayHook;
          plan.replayHook = null;
          await hook.run();
        }
        const pending = plan.conflicts.get(kind) ?? 0;
        if (pending > 0) {
          plan.conflicts.set(kind, pending - 1);
          plan.injected.push({ kind, at: state.now() });
          throw conflictFor(input, state.tables);
        }
        if (crash && !crash.crashed) {
          const ending =
            kind === "runEnd" || (kind === "finish" && input.TransactItems !== undefined);
          if (crash.crash === "beforeFinish" && ending) {
            crash.crashed = true;
            throw new InjectedCrash("worker died before its finishing write");
          }
          if (
            crash.crash === "betweenWrites" &&
            crash.runWritten &&
            input.TableName === state.tables.jobs &&
            input.UpdateExpression !== undefined
          ) {
            crash.crashed = true;
            throw new InjectedCrash("worker died between the run's write and the job's write");
          }
        }
        const result = await next(args);
        if (crash && !crash.crashed) {
          if (kind === "runEnd") crash.runWritten = true;
          if (crash.crash === "afterStart" && kind === "start") {
            crash.crashed = true;
            throw new InjectedCrash("worker died right after its start write");
          }
        }
        const losingAs: LostKind =
          apiRequest.getStore() && plan.lostAnswers.get("api") ? "api" : kind;
        const losing = plan.lostAnswers.get(losingAs) ?? 0;
        if (losing > 0 && WRITES.has(context.commandName ?? "") && !answerLost.has(args.input)) {
          answerLost.add(args.input);
          plan.lostAnswers.set(losingAs, losing - 1);
          plan.lost.push({ kind: losingAs, at: state.now() });
          // Inside the SDK's retry loop: the SDK sends the applied write again, as for a real 500.
          throw new InternalServerError({
            message: "injected: answer lost after the write was applied",
            $metadata: { httpStatusCode: 500 },
          });
        }
        return result;
      } finally {
        if (interleaved) {
          plan.heldClaim = null;
          releaseHeld();
          await interleaved;
        }
      }
    };
  client.middlewareStack.add(middleware, {
    step: "finalizeRequest",
    priority: "low",
    name: "modelFaults",
  });
}
