import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { dispatchShard } from "../../shared/dispatch/dispatcher.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { fuzzCases, fuzzClockStart, fuzzSeed, fuzzTimeoutMs } from "../support/fuzz-scale.js";
import { scheduleInputArb } from "../support/schedules.js";
import { JOB_TYPES } from "./support.js";

/**
 * The hostile fuzz (fuzz.test.ts) sends bodies that must be refused. This one sends what a tenant
 * may legitimately send, in any combination (every policy, priority, retry, timeout, payload and
 * name shape, schedules at the edges), and then edits, pauses, resumes, cancels and triggers the
 * jobs (triggers also two at once) while the clock moves on by whole seconds and milliseconds
 * and dispatcher passes claim what they wrote. No answer may be a 5xx, and no pass may fail.
 * The clock starts where the seed says (fuzzClockStart), so FUZZ_SEED replays a run's answers.
 */
const SEED = fuzzSeed();
const CASES = fuzzCases(6);
const TIMEOUT_MS = fuzzTimeoutMs(300_000);
const KEY = "valid-fuzz-key";
let fixture: EngineFixture;
let app: ReturnType<typeof createApiApp>;
let now = fuzzClockStart(SEED);

beforeAll(async () => {
  // The shortest lookahead the handlers take (60 s, as the model's): a create, edit or resume of
  // a per-second schedule claims every occurrence of its fast-path window (lookahead + 2 min),
  // about 180 runs instead of the default 300 s's 420, and its closing cancel ends as many. Those
  // are still four claims of 50 chained, and the ticks (to ten minutes) still fall inside and far
  // past the window and the misfire grace.
  fixture = await createEngineFixture({
    clock: () => now,
    settings: { shardCount: 1, maxShardCount: 1, lookaheadMs: 60_000 },
  });
  app = createApiApp({
    engine: fixture.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, "tenant-valid-fuzz"]])),
  });
});
afterAll(() => fixture.destroy());

async function send(method: string, path: string, body?: unknown, ifMatch?: string) {
  const response = await app.request(path, {
    method,
    headers: {
      Authorization: `Bearer ${KEY}`,
      "Content-Type": "application/json",
      ...(ifMatch === undefined ? {} : { "If-Match": ifMatch }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, text: await response.text() };
}

const dense = fc.constantFrom<unknown>(
  { cron: "* * * * * *", timezone: "UTC" },
  { cron: "*/10 * * * * *", timezone: "Europe/Berlin" },
  { every: "PT1S" },
  { every: "PT1.001S" },
);

const fields = {
  schedule: fc.oneof(scheduleInputArb, dense),
  name: fc.string({ unit: "binary", maxLength: 200 }),
  payload: fc.jsonValue({ maxDepth: 3 }),
  retry: fc.record(
    {
      maxAttempts: fc.integer({ min: 1, max: 100 }),
      initialDelaySeconds: fc.integer({ min: 0, max: 604_800 }),
      maxDelaySeconds: fc.integer({ min: 0, max: 604_800 }),
    },
    { requiredKeys: [] },
  ),
  misfirePolicy: fc.constantFrom("skip", "fire_once", "fire_all"),
  overlapPolicy: fc.constantFrom("skip", "buffer_one", "allow"),
  priority: fc.constantFrom("high", "normal", "low"),
  timeoutSeconds: fc.integer({ min: 1, max: 900 }),
};
const createBody = fc.record(fields, { requiredKeys: ["schedule"] });
const editBody = fc.record(
  { ...fields, inFlight: fc.constantFrom("skip", "complete") },
  { requiredKeys: [] },
);

type Step =
  | { readonly kind: "edit"; readonly body: Record<string, unknown> }
  | { readonly kind: "pause" | "resume" | "cancel" | "trigger" | "trigger-twice" | "pass" };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  editBody.map((body): Step => ({ kind: "edit", body })),
  fc.constantFrom<Step>(
    { kind: "pause" },
    { kind: "resume" },
    { kind: "cancel" },
    { kind: "trigger" },
    { kind: "trigger-twice" },
    { kind: "pass" },
    { kind: "pass" },
  ),
);
/** How far the clock moves before a step: not at all, milliseconds, or up to ten minutes. */
const tickArb = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 1, max: 999 }),
  fc.integer({ min: 1, max: 600 }).map((s) => s * 1000),
);

describe("fuzz: well-formed requests in any combination", () => {
  it("never answer 5xx, and dispatcher passes over what they wrote never fail", {
    timeout: TIMEOUT_MS,
  }, async () => {
    await fc.assert(
      fc.asyncProperty(
        createBody,
        fc.array(fc.tuple(tickArb, stepArb), { minLength: 1, maxLength: 6 }),
        async (body, steps) => {
          const created = await send("POST", "/jobs", { type: "noop", ...body });
          const context = `${JSON.stringify(body).slice(0, 300)} at ${now.toISOString()}`;
          expect(created.status, `create ${context}: ${created.text}`).toBeLessThan(500);
          if (created.status !== 201) return;
          const id = JobSchema.parse(JSON.parse(created.text)).id;
          const problems: string[] = [];
          for (const [tick, step] of steps) {
            now = new Date(now.getTime() + tick);
            if (step.kind === "pass") {
              const pass = await dispatchShard(fixture.engine, 0, "fuzz-dispatcher");
              expect(pass.outcome, `pass at ${now.toISOString()} after ${context}`).toBe("swept");
              continue;
            }
            const version = JobSchema.parse(
              JSON.parse((await send("GET", `/jobs/${id}`)).text),
            ).version;
            const answers =
              step.kind === "edit"
                ? [await send("PATCH", `/jobs/${id}`, step.body, `"${version}"`)]
                : step.kind === "trigger-twice"
                  ? await Promise.all([
                      send("POST", `/jobs/${id}/trigger`),
                      send("POST", `/jobs/${id}/trigger`),
                    ])
                  : [await send("POST", `/jobs/${id}/${step.kind}`)];
            for (const answer of answers) {
              if (answer.status >= 500) {
                problems.push(
                  `${step.kind} at ${now.toISOString()} after ${context}: ${answer.text}`,
                );
              }
            }
          }
          expect(problems).toEqual([]);
          // Dense schedules left running would make every later pass claim them all again.
          expect((await send("POST", `/jobs/${id}/cancel`)).status).toBeLessThan(500);
        },
      ),
      { numRuns: CASES, seed: SEED },
    );
  });
});
