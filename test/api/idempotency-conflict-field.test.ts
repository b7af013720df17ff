import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiHarness, expectError, laterJob, startApi } from "./support.js";

/**
 * docs/api.md, "Errors": `field` names the offending input, `Idempotency-Key` among them. A key
 * sent as the `Idempotency-Key` header that conflicts (another body under it; a rotation a later
 * one replaced) is answered 409 naming `idempotencyKey`, a body field the request did not send,
 * and one `POST /webhook-secret/rotate` does not even have: a client reading `field` to tell
 * which of its inputs to change is pointed at nothing it sent.
 */
describe("a 409 idempotency_conflict for a key sent as the Idempotency-Key header", () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api.close());

  it("POST /jobs: another body under the header's key names Idempotency-Key", async () => {
    const headers = { "Idempotency-Key": `conflict-field-${Date.now()}` };
    const first = await api.call("POST", "/jobs", { body: laterJob({ name: "one" }), headers });
    expect(first.status, first.text).toBe(201);
    const other = await api.call("POST", "/jobs", { body: laterJob({ name: "two" }), headers });
    expectError(other, 409, { code: "idempotency_conflict", field: "Idempotency-Key" });
  });

  it("POST /webhook-secret/rotate: a replaced rotation's key names Idempotency-Key", async () => {
    const rotate = (key: string) =>
      api.call("POST", "/webhook-secret/rotate", { headers: { "Idempotency-Key": key } });
    const old = `rotate-field-${Date.now()}`;
    expect((await rotate(old)).status).toBe(200);
    expect((await rotate(`${old}-later`)).status).toBe(200);
    expectError(await rotate(old), 409, { code: "idempotency_conflict", field: "Idempotency-Key" });
  });

  it("POST /jobs: another body under a key sent in the body only names idempotencyKey", async () => {
    const idempotencyKey = `conflict-body-${Date.now()}`;
    const first = await api.call("POST", "/jobs", { body: laterJob({ idempotencyKey }) });
    expect(first.status, first.text).toBe(201);
    const other = await api.call("POST", "/jobs", {
      body: laterJob({ name: "two", idempotencyKey }),
    });
    expectError(other, 409, { code: "idempotency_conflict", field: "idempotencyKey" });
  });
});
