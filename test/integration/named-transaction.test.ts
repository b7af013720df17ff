import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConditionsFailedError, writeTransaction } from "../../shared/storage/transaction.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";

describe("writeTransaction", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const put = (pk: string, condition: string) => ({
    Put: {
      TableName: f.engine.tables.jobs,
      Item: { pk, sk: "TEST", value: pk },
      ConditionExpression: condition,
      ReturnValuesOnConditionCheckFailure: "ALL_OLD" as const,
    },
  });

  it("names each write whose condition failed and returns its item as it stood", async () => {
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.jobs,
        Item: { pk: "named#b", sk: "TEST", value: "old" },
      }),
    );
    const failure = await writeTransaction(f.engine, "test", [
      { name: "a", write: put("named#a", "attribute_not_exists(pk)") },
      { name: "b", write: put("named#b", "attribute_not_exists(pk)") },
    ]).catch((error: unknown) => error);

    expect(failure).toBeInstanceOf(ConditionsFailedError);
    const failed = failure as ConditionsFailedError<"a" | "b">;
    expect([...failed.failed]).toEqual(["b"]);
    expect(failed.has("a")).toBe(false);
    expect(failed.item("b")).toMatchObject({ pk: "named#b", value: "old" });
    expect(failed.item("a")).toBeNull();
  });

  it("writes every item when the conditions hold", async () => {
    await writeTransaction(f.engine, "test", [
      { name: "c", write: put("named#c", "attribute_not_exists(pk)") },
      { name: "d", write: put("named#d", "attribute_not_exists(pk)") },
    ]);
    const written = await f.engine.doc.send(
      new GetCommand({ TableName: f.engine.tables.jobs, Key: { pk: "named#d", sk: "TEST" } }),
    );
    expect(written.Item).toMatchObject({ value: "named#d" });
  });

  it("sends again through contention and throws other failures as they came", async () => {
    const faulty = withFaults(f.engine, { operation: "TransactWriteItems", times: 2 });
    await writeTransaction(faulty.engine, "test", [
      { name: "e", write: put("named#e", "attribute_not_exists(pk)") },
    ]);
    faulty.destroy();
    expect(faulty.injected.count).toBe(2);
    const broken = await writeTransaction(f.engine, "test", [
      { name: "f", write: { Put: { TableName: "no-such-table", Item: { pk: "x", sk: "y" } } } },
    ]).catch((error: unknown) => error);
    expect(broken).not.toBeInstanceOf(ConditionsFailedError);
    expect(broken).toBeInstanceOf(Error);
  });
});
