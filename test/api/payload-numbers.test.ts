import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { WebhookSecretSchema } from "../../shared/api/schemas/webhook-secret.js";
import { type JobHandler, jobType } from "../../shared/execution/job-contract.js";
import { type Receiver, startReceiver } from "../support/receiver.js";
import { type ApiHarness, expectError, inMinutes, type Reply, startApi } from "./support.js";

/**
 * A payload is any JSON, and its numbers are the caller's: a 64-bit id past 2^53, or a decimal
 * with more digits than a double keeps, is stored, answered and delivered with the digits sent,
 * end to end (create, edit, batch create, GET, the webhook's body, a custom handler's input).
 */
const BIG = "12345678901234567890";
const FINE = "0.1000000000000000055511151231257827";
const NEGATIVE = "-98765432109876543210987654321";
/** The payload as a caller writes it, numbers a double would change in it. */
const PAYLOAD = `{"id":${BIG},"ratio":${FINE},"list":[1,${NEGATIVE}],"name":"n"}`;
/** As delivered: the same JSON, white space aside. */
const exactly = (text: string) => text.replace(/\s+/g, "");

let api: ApiHarness;
let receiver: Receiver;
beforeAll(async () => {
  api = await startApi();
  const secret = WebhookSecretSchema.parse((await api.call("GET", "/webhook-secret")).body).secret;
  receiver = await startReceiver({ secret });
});
afterAll(async () => {
  await receiver.close();
  await api.close();
});

const json = { "Content-Type": "application/json" };
const idOf = (reply: Reply) => (reply.body as { id: string }).id;

/** The text of `payload` in a job as answered, found by its first field. */
function expectPayloadIn(reply: Reply, payload: string): void {
  expect(reply.status, reply.text).toBeLessThan(300);
  expect(reply.text).toContain(`"payload":${exactly(payload)}`);
}

/** Runs the job's next message with the worker code (an http handler and a `report` handler). */
async function runNext(jobId: string, handlers: Record<string, JobHandler> = {}): Promise<void> {
  const f = api.fixture;
  await f.process(f.workerDeps("w", handlers), await f.nextDelivery(f.engine.queues.normal, jobId));
}

function deliveredBody(jobId: string): string[] {
  return receiver.deliveries.filter((d) => d.jobId === jobId).map((d) => d.body);
}

const httpJob = (payload: string, runAt = new Date().toISOString()) =>
  `{"type":"http","schedule":{"runAt":"${runAt}"},"target":{"url":"${receiver.url}"},"payload":${payload}}`;

describe("a payload's numbers", () => {
  it("are stored, answered and delivered as written by a create, and a GET", async () => {
    const created = await api.call("POST", "/jobs", { raw: httpJob(PAYLOAD), headers: json });
    expect(created.status, created.text).toBe(201);
    expectPayloadIn(created, PAYLOAD);
    const jobId = idOf(created);
    expectPayloadIn(await api.call("GET", `/jobs/${jobId}`), PAYLOAD);
    const listed = await api.call("GET", "/jobs?limit=100");
    expect(listed.text).toContain(`"payload":${exactly(PAYLOAD)}`);
    await runNext(jobId);
    expect(deliveredBody(jobId)).toEqual([exactly(PAYLOAD)]);
  });

  it("are stored, answered and delivered as written by an edit, and a trigger runs them", async () => {
    const created = await api.call("POST", "/jobs", {
      raw: httpJob('{"id":1}', inMinutes(60)),
      headers: json,
    });
    expect(created.status, created.text).toBe(201);
    const jobId = idOf(created);
    const edited = await api.call("PATCH", `/jobs/${jobId}`, {
      raw: `{"payload": ${PAYLOAD}}`,
      headers: { ...json, "If-Match": '"1"' },
    });
    expectPayloadIn(edited, PAYLOAD);
    expectPayloadIn(await api.call("GET", `/jobs/${jobId}`), PAYLOAD);
    // The edit's retry (its answer lost) is the same edit: its hash is of the digits sent.
    const repeat = await api.call("PATCH", `/jobs/${jobId}`, {
      raw: `{"payload": ${PAYLOAD}}`,
      headers: { ...json, "If-Match": '"1"' },
    });
    expectPayloadIn(repeat, PAYLOAD);
    // Another id with the same double is another edit, refused at the version it was sent at.
    const other = PAYLOAD.replace(BIG, "12345678901234567891");
    expectError(
      await api.call("PATCH", `/jobs/${jobId}`, {
        raw: `{"payload": ${other}}`,
        headers: { ...json, "If-Match": '"1"' },
      }),
      412,
    );
    expect((await api.call("POST", `/jobs/${jobId}/trigger`)).status).toBe(202);
    await runNext(jobId);
    expect(deliveredBody(jobId)).toEqual([exactly(PAYLOAD)]);
  });

  it("are stored, answered and delivered as written by a batch create", async () => {
    const other = PAYLOAD.replace(BIG, "18446744073709551615");
    const reply = await api.call("POST", "/jobs:batch", {
      raw: `{"jobs":[${httpJob(PAYLOAD)},${httpJob(other)}]}`,
      headers: json,
    });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.text).toContain(`"payload":${exactly(PAYLOAD)}`);
    expect(reply.text).toContain(`"payload":${exactly(other)}`);
    const results = (reply.body as { results: { job: { id: string } }[] }).results;
    const [first, second] = results.map((result) => result.job.id);
    if (first === undefined || second === undefined) throw new Error(reply.text);
    expectPayloadIn(await api.call("GET", `/jobs/${second}`), other);
    await runNext(first);
    await runNext(second);
    expect([deliveredBody(first), deliveredBody(second)]).toEqual([
      [exactly(PAYLOAD)],
      [exactly(other)],
    ]);
  });

  it("reach a custom type's handler as written", async () => {
    const inputs: unknown[] = [];
    const report = jobType(
      { name: "report", payload: z.unknown(), description: "Any JSON, for the tests." },
      async (ctx) => {
        inputs.push(ctx.payload);
      },
    );
    const created = await api.call("POST", "/jobs", {
      raw: `{"type":"report","schedule":{"runAt":"${new Date().toISOString()}"},"payload":${PAYLOAD}}`,
      headers: json,
    });
    expect(created.status, created.text).toBe(201);
    await runNext(idOf(created), { report: report.handler });
    const [input] = inputs as { id: unknown; ratio: unknown; list: unknown[]; name: string }[];
    expect([String(input?.id), String(input?.ratio), String(input?.list[1])]).toEqual([
      BIG,
      FINE,
      NEGATIVE,
    ]);
    // A number a double holds exactly is a number, as before.
    expect([input?.list[0], input?.name]).toEqual([1, "n"]);
  });

  it("key a create's idempotency by the digits sent", async () => {
    const body = httpJob(PAYLOAD, inMinutes(60));
    const headers = { ...json, "Idempotency-Key": `exact-${Date.now()}` };
    const first = await api.call("POST", "/jobs", { raw: body, headers });
    expect(first.status, first.text).toBe(201);
    const again = await api.call("POST", "/jobs", { raw: body, headers });
    expect(again.status, again.text).toBe(200);
    expect(idOf(again)).toBe(idOf(first));
    expectPayloadIn(again, PAYLOAD);
    const other = body.replace(BIG, "12345678901234567891");
    expectError(await api.call("POST", "/jobs", { raw: other, headers }), 409, {
      code: "idempotency_conflict",
    });
  });
});
