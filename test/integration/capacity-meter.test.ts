import { BatchGetCommand, GetCommand, PutCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CapacityMeter,
  meterCapacity,
  withCapacityMeter,
} from "../../shared/storage/capacity-meter.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";

/** Against DynamoDB Local, which reports ConsumedCapacity as the service does (by item size). */
describe("the API's capacity meter", () => {
  let f: EngineFixture;
  const key = { pk: "METER#1", sk: "ITEM" };
  beforeAll(async () => {
    f = await createEngineFixture();
    meterCapacity(f.engine.doc);
    // Installing it again (a second API app on the same client) replaces it: counted once.
    meterCapacity(f.engine.doc);
    // 40 KB: 10 units read consistently, 5 eventually consistent.
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.jobs,
        Item: { ...key, blob: "x".repeat(40_000) },
      }),
    );
  });
  afterAll(() => f.destroy());

  const get = (consistent: boolean) =>
    f.engine.doc.send(
      new GetCommand({ TableName: f.engine.tables.jobs, Key: key, ConsistentRead: consistent }),
    );

  it("counts the read and write units of the calls made inside a meter, each by its kind: single and batch reads, writes by the size of the item written", async () => {
    const meter = new CapacityMeter();
    const answer = await withCapacityMeter(meter, async () => {
      const read = await get(true);
      await f.engine.doc.send(
        new BatchGetCommand({ RequestItems: { [f.engine.tables.jobs]: { Keys: [key] } } }),
      );
      await f.engine.doc.send(
        new PutCommand({ TableName: f.engine.tables.jobs, Item: { pk: "METER#2", sk: "ITEM" } }),
      );
      // One attribute added to the 40 KB item: billed as the whole item, 40 units.
      await f.engine.doc.send(
        new UpdateCommand({
          TableName: f.engine.tables.jobs,
          Key: key,
          UpdateExpression: "ADD touched :one",
          ExpressionAttributeValues: { ":one": 1 },
        }),
      );
      return read;
    });
    expect(answer.ConsumedCapacity).toMatchObject({ CapacityUnits: 10 });
    expect(meter.close()).toEqual({ reads: 15, writes: 41 });
  });

  it("leaves calls outside a meter, and after it is closed, as they were: nothing asked, nothing counted", async () => {
    expect((await get(true)).ConsumedCapacity).toBeUndefined();
    const meter = new CapacityMeter();
    const late = await withCapacityMeter(meter, async () => {
      await get(false);
      meter.close();
      return get(true);
    });
    expect(late.ConsumedCapacity).toBeUndefined();
    expect(meter.units).toEqual({ reads: 5, writes: 0 });
  });

  it("counts on each meter only its own calls when two run at once, not a call started before it", async () => {
    const large = new CapacityMeter();
    const small = new CapacityMeter();
    // Started outside any meter, awaited inside one: sent as it was, counted on neither.
    const before = get(true);
    await Promise.all([
      withCapacityMeter(large, () => Promise.all(Array.from({ length: 5 }, () => get(true)))),
      withCapacityMeter(small, async () => {
        await before;
        return get(false);
      }),
    ]);
    expect((await before).ConsumedCapacity).toBeUndefined();
    expect(large.close()).toEqual({ reads: 50, writes: 0 });
    expect(small.close()).toEqual({ reads: 5, writes: 0 });
  });

  it("counts a call the SDK sent again once, on the meter of the work that made it", async () => {
    // Past the SDK's retry middleware: its first attempt is refused as DynamoDB throttles, and the
    // SDK sends it again after a wait, while another meter's call runs.
    let refused = 0;
    f.engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input: unknown = args.input;
        const consistent =
          typeof input === "object" && input !== null && "ConsistentRead" in input
            ? input.ConsistentRead === true
            : false;
        if (context.commandName === "GetItemCommand" && consistent && refused === 0) {
          refused++;
          throw Object.assign(new Error("Rate of requests exceeds the allowed throughput."), {
            name: "ThrottlingException",
            $fault: "client",
            $metadata: { httpStatusCode: 400 },
          });
        }
        return next(args);
      },
      { step: "finalizeRequest", priority: "low", name: "throttleOnce" },
    );
    try {
      const retried = new CapacityMeter();
      const other = new CapacityMeter();
      await Promise.all([
        withCapacityMeter(retried, () => get(true)),
        withCapacityMeter(other, () => get(false)),
      ]);
      expect(refused).toBe(1);
      expect(retried.close()).toEqual({ reads: 10, writes: 0 });
      expect(other.close()).toEqual({ reads: 5, writes: 0 });
    } finally {
      f.engine.doc.middlewareStack.remove("throttleOnce");
    }
  });
});
