import { afterAll, beforeAll } from "vitest";
import { type CallCounter, countDynamoDb } from "../../bench/aws-counter.js";
import { indexKeyAttributesOf, transactionsDoubled } from "../../bench/requests-per-run.js";
import type { Engine } from "../../shared/engine.js";
import { inProcessApi } from "../api/support.js";
import { createEngineFixture, type EngineFixture } from "./engine-fixture.js";
import { createTestClients, type TestClients } from "./namespace.js";

export interface SentRequest {
  readonly command: string;
  /** Whether it names a QUOTA# item (the tenant's quota partition). */
  readonly touchesQuota: boolean;
  /** The items a BatchGetItem asks for (0 for any other request). */
  readonly itemsAsked: number;
}

/** The keys a BatchGetItem's input asks for, over its tables. */
function keysAsked(input: object): number {
  const requestItems: unknown = Reflect.get(input, "RequestItems");
  if (typeof requestItems !== "object" || requestItems === null) return 0;
  let keys = 0;
  for (const table of Object.values(requestItems)) {
    const asked: unknown = typeof table === "object" && table !== null ? table.Keys : undefined;
    if (Array.isArray(asked)) keys += asked.length;
  }
  return keys;
}

/** An engine like `base` whose DynamoDB requests are recorded, each as `SentRequest`. */
export function countingEngine(base: Engine) {
  const clients = createTestClients();
  const sent: SentRequest[] = [];
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const command = context.commandName ?? "";
      sent.push({
        command,
        touchesQuota: JSON.stringify(args.input).includes("QUOTA#"),
        itemsAsked: command === "BatchGetItemCommand" ? keysAsked(args.input) : 0,
      });
      return next(args);
    },
    { step: "initialize", name: "countDynamoRequests" },
  );
  return { engine: { ...base, doc: clients.doc }, sent, destroy: () => clients.destroy() };
}

/** The requests by command: { GetItemCommand: 2, … }. */
export const byCommand = (sent: readonly SentRequest[]) =>
  Object.fromEntries(
    [...new Set(sent.map((s) => s.command))].map((c) => [
      c,
      sent.filter((s) => s.command === c).length,
    ]),
  );

/**
 * The API in-process over a fresh fixture for the file's tests (set up before them, torn down
 * after), whose DynamoDB calls `counter` books in billed units as the requests bench does
 * (bench/aws-counter.ts: a transaction as AWS bills it, an index unit per index key written).
 */
export function useBilledApi(counter: CallCounter, identity: { key: string; tenant: string }) {
  let fixture: EngineFixture | undefined;
  let clients: TestClients | undefined;
  let call: ReturnType<typeof inProcessApi> | undefined;
  beforeAll(async () => {
    fixture = await createEngineFixture();
    clients = createTestClients();
    countDynamoDb(clients.dynamo, counter, {
      transactionsDoubled: await transactionsDoubled(clients, fixture.engine.tables.jobs),
      indexKeyAttributes: indexKeyAttributesOf(fixture.engine.tables),
    });
    call = inProcessApi({ ...fixture.engine, doc: clients.doc }, identity);
  });
  afterAll(async () => {
    clients?.destroy();
    await fixture?.destroy();
  });
  return {
    api: (...args: Parameters<ReturnType<typeof inProcessApi>>) => {
      if (call === undefined) throw new Error("no API outside a test");
      return call(...args);
    },
    fixture: (): EngineFixture => {
      if (fixture === undefined) throw new Error("no fixture outside a test");
      return fixture;
    },
  };
}
