import { describe, expect, it } from "vitest";
import { transactionWriteUnits } from "../../bench/aws-counter.js";

const INDEX_KEYS = ["tenantPk", "inflightPk", "deadPk"];

describe("the requests bench's transaction units", () => {
  it("bills two units per item, condition checks included, and an index unit per index key a put carries", () => {
    const run = (n: number) => ({
      Put: {
        TableName: "runs",
        Item: { pk: { S: `JOB#${n}` }, sk: { S: "RUN#x#0001" }, inflightPk: { S: "INFLIGHT#1" } },
      },
    });
    const units = transactionWriteUnits(
      {
        TransactItems: [
          { ConditionCheck: { TableName: "jobs", Key: {}, ConditionExpression: "fence = :f" } },
          { Delete: { TableName: "jobs", Key: {} } },
          { Update: { TableName: "jobs", Key: {}, UpdateExpression: "SET nextRunAt = :n" } },
          ...Array.from({ length: 10 }, (_, n) => run(n)),
        ],
      },
      INDEX_KEYS,
    );
    expect(units).toEqual({ table: 26, index: 10 });
  });

  it("counts an update that sets or removes an index key, through attribute names too", () => {
    const units = transactionWriteUnits(
      {
        TransactItems: [
          {
            Update: {
              TableName: "runs",
              Key: {},
              UpdateExpression: "REMOVE inflightPk, inflightSk",
            },
          },
          {
            Update: {
              TableName: "runs",
              Key: {},
              UpdateExpression: "SET #d = :d, #s = :s",
              ExpressionAttributeNames: { "#d": "deadPk", "#s": "status" },
            },
          },
          { Update: { TableName: "jobs", Key: {}, UpdateExpression: "SET tenantPkCopy = :x" } },
        ],
      },
      INDEX_KEYS,
    );
    expect(units).toEqual({ table: 6, index: 2 });
  });

  it("bills a put by its size in KB", () => {
    const big = {
      Put: { TableName: "jobs", Item: { pk: { S: "JOB#1" }, payload: { S: "x".repeat(2_500) } } },
    };
    expect(transactionWriteUnits({ TransactItems: [big] }, INDEX_KEYS)).toEqual({
      table: 6,
      index: 0,
    });
  });
});
