import { randomBytes } from "node:crypto";
import { PutCommand } from "@aws-sdk/lib-dynamodb";
import { describe, expect, it } from "vitest";
import { CallCounter } from "../../bench/aws-counter.js";
import { runId as runIdOf } from "../../shared/keys.js";
import { runKeyOf } from "../../shared/storage/run-reads.js";
import { MAX_STORED_TEXT_BYTES } from "../../shared/storage/stored-text.js";
import { useBilledApi } from "../support/request-count.js";

/**
 * What one request without credentials costs on the async run routes (POST /runs/{runId}/heartbeat
 * and /complete), which skip tenant authentication: DynamoDB calls and billed read units, as the
 * requests bench's counter books them (DynamoDB Local's reported capacity, with AWS's floor of one
 * unit for a strongly consistent read that finds nothing). No tenant is charged for any of it.
 */
const counter = new CallCounter();
const { api, fixture } = useBilledApi(counter, { key: "cost-key", tenant: "cost-tenant" });

/** A token of the right form that no run was given. */
const bogusToken = () => `rt2.1.${randomBytes(32).toString("base64url")}`;

async function costOf(path: string, token: string, body?: unknown) {
  counter.reset();
  counter.phase = "request";
  const reply = await api("POST", path, {
    headers: { Authorization: `Bearer ${token}` },
    ...(body !== undefined ? { body } : {}),
  });
  counter.phase = null;
  const ops = Object.entries(counter.snapshot().request ?? {});
  return {
    status: reply.status,
    calls: Object.fromEntries(ops.map(([op, count]) => [op, count.calls])),
    units: ops.reduce((total, [, count]) => total + count.capacityUnits, 0),
  };
}

describe("a request with a bogus run token", () => {
  const scheduledFor = new Date("2030-01-15T08:00:00.000Z");

  it("on a run id that cannot be one: 401 and no DynamoDB call", async () => {
    expect(await costOf("/runs/not-a-run/heartbeat", bogusToken())).toEqual({
      status: 401,
      calls: {},
      units: 0,
    });
  });

  it("with a malformed token: 401 and no DynamoDB call", async () => {
    const path = `/runs/${runIdOf("01J9Z3V6K8N4QX2M7R5T0W1Y3B", scheduledFor, 1)}/heartbeat`;
    expect(await costOf(path, "rt2.1.short")).toEqual({ status: 401, calls: {}, units: 0 });
  });

  it("of the right form, on a run id that parses but names no run: one consistent GetItem, 1 read unit, charged to no tenant", async () => {
    const runId = runIdOf("01J9Z3V6K8N4QX2M7R5T0W1Y3B", scheduledFor, 1);
    expect(await costOf(`/runs/${runId}/heartbeat`, bogusToken())).toEqual({
      status: 401,
      calls: { "DynamoDB.GetItem": 1 },
      units: 1,
    });
    expect(await costOf(`/runs/${runId}/complete`, bogusToken(), { status: "succeeded" })).toEqual({
      status: 401,
      calls: { "DynamoDB.GetItem": 1 },
      units: 1,
    });
  });

  it("of the right form, on an existing run whose error and reason are as long as stored texts get: one consistent GetItem of 3 read units", async () => {
    const ref = { jobId: "cost-job", scheduledFor: scheduledFor.toISOString(), attempt: 1 };
    await fixture().engine.doc.send(
      new PutCommand({
        TableName: fixture().engine.tables.runs,
        Item: {
          ...runKeyOf(ref),
          ...ref,
          runId: runIdOf(ref.jobId, scheduledFor, 1),
          tenantId: "cost-tenant",
          status: "DEAD",
          fence: 1,
          error: "e".repeat(MAX_STORED_TEXT_BYTES),
          reason: "r".repeat(MAX_STORED_TEXT_BYTES),
          runTokenHash: randomBytes(32).toString("base64url"),
          previousRunTokenHash: randomBytes(32).toString("base64url"),
        },
      }),
    );
    const runId = runIdOf(ref.jobId, scheduledFor, 1);
    expect(await costOf(`/runs/${runId}/heartbeat`, bogusToken())).toEqual({
      status: 401,
      calls: { "DynamoDB.GetItem": 1 },
      units: 3,
    });
  });
});
