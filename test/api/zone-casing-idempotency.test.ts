import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiHarness, startApi } from "./support.js";

/**
 * docs/api.md: a repeat of a create is compared as the job it asks for, so "a schedule written
 * differently for the same times" is the same body, and a `timezone` is taken in any letter case
 * (adversarial review h87). A link such as `US/Eastern` written `us/eastern` is stored as typed
 * (test/unit/schedule/zone-casing.test.ts), so the repeat asks for another job: 409.
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe("an idempotent create repeated with the zone in another letter case", () => {
  it.each([
    ["Europe/London", "europe/london"],
    ["US/Eastern", "us/eastern"],
  ])("%s then %s answers the first job (200)", async (zone, written) => {
    const idempotencyKey = `zone-case-${zone}`;
    const body = (timezone: string) => ({
      type: "noop",
      schedule: { cron: "0 9 * * *", timezone },
      idempotencyKey,
    });
    const created = await api.call("POST", "/jobs", { body: body(zone) });
    expect(created.status, created.text).toBe(201);
    const again = await api.call("POST", "/jobs", { body: body(written) });
    expect(again.status, again.text).toBe(200);
  });
});
