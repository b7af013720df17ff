import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiApp } from "../../shared/api/app.js";
import { bearerAuthenticator } from "../../shared/api/auth.js";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { PreviewSchema } from "../../shared/api/schemas/previews.js";
import {
  LAST_STORABLE_MS,
  nextOccurrence,
  occurrences,
  type ScheduleSpec,
} from "../../shared/schedule/index.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { fuzzCases, fuzzClockStart, fuzzSeed, fuzzTimeoutMs } from "../support/fuzz-scale.js";
import { instantMsArb, scheduleInputArb } from "../support/schedules.js";
import { JOB_TYPES } from "./support.js";

/**
 * Any schedule object a tenant sends to create, edit or preview gets a 2xx or a 4xx naming a
 * schedule field, never a 5xx, with the clock anywhere from 1970 to the last minutes of year
 * 9999 (and sometimes going back between create and edit). For every schedule the API accepted,
 * the stored form's occurrences can be iterated from any now up to the end of the range without
 * throwing, and never leave it: no due entry can carry a time the keys cannot hold.
 */
const KEY = "schedule-fuzz-key";
const SEED = fuzzSeed();
/** Where the seed starts the clock, so FUZZ_SEED replays the instants the handlers read. */
const PRESENT_MS = fuzzClockStart(SEED).getTime();
let fixture: EngineFixture;
let app: ReturnType<typeof createApiApp>;
let now = new Date(PRESENT_MS);

beforeAll(async () => {
  fixture = await createEngineFixture({ clock: () => now });
  app = createApiApp({
    engine: fixture.engine,
    jobTypes: JOB_TYPES,
    authenticate: bearerAuthenticator(new Map([[KEY, "tenant-schedule-fuzz"]])),
  });
});
afterAll(() => fixture.destroy());

interface Answer {
  readonly status: number;
  readonly text: string;
}

async function send(method: string, path: string, body?: unknown, ifMatch?: number) {
  const response = await app.request(path, {
    method,
    headers: {
      Authorization: `Bearer ${KEY}`,
      "Content-Type": "application/json",
      ...(ifMatch === undefined ? {} : { "If-Match": `"${ifMatch}"` }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const answer: Answer = { status: response.status, text: await response.text() };
  return answer;
}

/** A refusal must be a 4xx whose every issue names a schedule field. */
function expectAcceptedOrScheduleIssue(answer: Answer, accepted: number, what: string): void {
  const context = `${what} → ${answer.status} ${answer.text.slice(0, 400)}`;
  if (answer.status === accepted) return;
  expect(answer.status, context).toBeGreaterThanOrEqual(400);
  expect(answer.status, context).toBeLessThan(500);
  const error = ErrorSchema.parse(JSON.parse(answer.text)).error;
  const fields = [error.field, ...(error.issues ?? []).map((i) => i.field)];
  for (const field of fields) expect(field, context).toMatch(/^schedule(\.|$)/);
}

/** The stored schedule's occurrences from each `from`: inside the range, increasing, no throw. */
function expectIterable(schedule: ScheduleSpec, froms: readonly number[]): void {
  for (const fromMs of froms) {
    const from = new Date(Math.min(fromMs, LAST_STORABLE_MS));
    let previous = from.getTime();
    let t = nextOccurrence(schedule, from);
    for (let i = 0; i < 5 && t !== null; i++) {
      expect(t.getTime()).toBeGreaterThan(previous);
      expect(t.getTime()).toBeLessThanOrEqual(LAST_STORABLE_MS);
      previous = t.getTime();
      t = nextOccurrence(schedule, t);
    }
    for (const o of occurrences(schedule, from, new Date(LAST_STORABLE_MS), 5)) {
      expect(o.getTime()).toBeLessThanOrEqual(LAST_STORABLE_MS);
    }
  }
}

/** An active job to edit when the fuzzed create gave none: due at the last storable instant. */
async function seedJob(): Promise<{ id: string; version: number }> {
  const seed = await send("POST", "/jobs", {
    type: "noop",
    schedule: { runAt: "9999-12-31T23:59:59.999Z" },
  });
  expect(seed.status, seed.text).toBe(201);
  const job = JobSchema.parse(JSON.parse(seed.text));
  return { id: job.id, version: job.version };
}

/**
 * A clock reading: mostly the run's present (within a minute of PRESENT_MS), often near the end
 * of the range, anywhere in it.
 */
const CASES = fuzzCases(30);
const TIMEOUT_MS = fuzzTimeoutMs(120_000);
const clockArb = fc.oneof(fc.integer({ min: PRESENT_MS, max: PRESENT_MS + 60_000 }), instantMsArb);

describe("schedule fuzz: create, edit, trigger and preview", () => {
  it("answer 2xx or a 4xx naming a schedule field, and accepted schedules iterate to year 9999", {
    timeout: TIMEOUT_MS,
  }, async () => {
    const statuses = new Map<string, number>();
    const count = (key: string) => statuses.set(key, (statuses.get(key) ?? 0) + 1);
    await fc.assert(
      fc.asyncProperty(
        scheduleInputArb,
        scheduleInputArb,
        clockArb,
        clockArb,
        fc.array(instantMsArb, { minLength: 2, maxLength: 4 }),
        async (first, second, createAt, editAt, froms) => {
          now = new Date(createAt);
          const created = await send("POST", "/jobs", { type: "noop", schedule: first });
          count(`create ${created.status}`);
          expectAcceptedOrScheduleIssue(
            created,
            201,
            `create ${JSON.stringify(first)} at ${now.toISOString()}`,
          );

          let target: { id: string; version: number } | undefined;
          if (created.status === 201) {
            const job = JobSchema.parse(JSON.parse(created.text));
            expectIterable(job.schedule as ScheduleSpec, [now.getTime(), ...froms]);
            if (job.status === "active") target = { id: job.id, version: job.version };
          }
          target ??= await seedJob();

          now = new Date(editAt);
          const what = `edit to ${JSON.stringify(second)} at ${now.toISOString()}`;
          const edited = await send(
            "PATCH",
            `/jobs/${target.id}`,
            { schedule: second },
            target.version,
          );
          count(`edit ${edited.status}`);
          expectAcceptedOrScheduleIssue(edited, 200, what);
          if (edited.status === 200) {
            const job = JobSchema.parse(JSON.parse(edited.text));
            expectIterable(job.schedule as ScheduleSpec, [now.getTime(), ...froms]);
          }

          const triggered = await send("POST", `/jobs/${target.id}/trigger`);
          count(`trigger ${triggered.status}`);
          expect(triggered.status, `trigger after ${what}: ${triggered.text}`).toBe(202);

          const preview = await send("POST", "/schedules/preview", { schedule: second });
          count(`preview ${preview.status}`);
          expectAcceptedOrScheduleIssue(preview, 200, `preview ${what}`);
          if (preview.status === 200) PreviewSchema.parse(JSON.parse(preview.text));
          const jobPreview = await send("GET", `/jobs/${target.id}/preview`);
          expect(jobPreview.status, jobPreview.text).toBe(200);
        },
      ),
      { numRuns: CASES, seed: SEED },
    );
    // The arbitraries must reach both outcomes of both writes, or the property proves little.
    for (const key of ["create 201", "create 400", "edit 200", "edit 400"]) {
      expect(
        statuses.get(key) ?? 0,
        `${JSON.stringify([...statuses])} (FUZZ_SEED=${SEED} replays this run)`,
      ).toBeGreaterThan(0);
    }
    // 150 cases of about eight API requests each: some 30 s on two cores, past the default bound.
  });
});
