import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { httpAnswerOf } from "../../shared/api/errors.js";
import { replayDeadLetter } from "../../shared/jobs/index.js";
import { listDeadLetters } from "../../shared/jobs/queries.js";
import {
  createEngineFixture,
  type EngineFixture,
  jobWithDeadRun,
} from "../support/engine-fixture.js";
import { type InjectedReason, withFaults } from "../support/faults.js";

const TENANT = "tenant-a";
/** writeTransaction's attempts under contention (MAX_CONTENTION_ATTEMPTS in dynamo-errors.ts). */
const CONTENTION_ATTEMPTS = 8;

/**
 * Storage contention that outlasts the retries is "busy" (503): nothing was written and the same
 * request may well pass ("Data model": throttling "retried and answered 503 where it outlasts the
 * retries"). A replay whose transaction is cancelled for contention alone, every attempt, wrote
 * nothing and was not replayed by anyone: its answer must not say it was.
 */
describe("a replay whose transaction meets contention on every attempt", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  it.each<InjectedReason>(["ThrottlingError", "TransactionConflict"])(
    "%s: answered busy (503), not 409 'replayed concurrently'; the dead letter is still listed, not replayed",
    async (reason) => {
      const { dead } = await jobWithDeadRun(f, { schedule: { every: "PT1H" } });
      const faulty = withFaults(f.engine, {
        operation: "TransactWriteItems",
        times: CONTENTION_ATTEMPTS,
        match: (input) => JSON.stringify(input).includes("replayedBy"),
        reason,
      });
      let error: unknown;
      try {
        await replayDeadLetter(faulty.engine, TENANT, dead.runId);
      } catch (caught) {
        error = caught;
      } finally {
        faulty.destroy();
      }
      expect(faulty.injected.count).toBe(CONTENTION_ATTEMPTS);
      const listed = await listDeadLetters(f.engine, TENANT, { limit: 100 });
      const still = (await f.runs()).find((r) => r.runId === dead.runId);
      expect(still).toMatchObject({ status: "DEAD", replayedBy: null });
      expect(listed.items.map((r) => r.runId)).toContain(dead.runId);
      expect(error, "the replay failed").toBeDefined();
      const answer = httpAnswerOf(error);
      expect([answer.status, answer.body.error.code, answer.body.error.message]).toEqual([
        503,
        "busy",
        expect.any(String),
      ]);
    },
  );
});
