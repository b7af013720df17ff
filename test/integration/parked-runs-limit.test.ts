import { randomBytes } from "node:crypto";
import { GetCommand, PutCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reap } from "../../shared/dispatch/reaper.js";
import type { Engine } from "../../shared/engine.js";
import { processRun } from "../../shared/execution/worker.js";
import { createJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { runId } from "../../shared/keys.js";
import type { Run } from "../../shared/model.js";
import { MAX_LISTED_RUNS } from "../../shared/storage/admission.js";
import { jobKey } from "../../shared/storage/items.js";
import { MAX_PARKED_RUNS } from "../../shared/storage/run-park.js";
import { getJob, getRun, runKeyOf } from "../../shared/storage/run-reads.js";
import {
  createEngineFixture,
  deliveryOfRun,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";

const TENANT = "tenant-a";
/** DynamoDB's largest item, which DynamoDB Local enforces as AWS does. */
const ITEM_LIMIT_BYTES = 400 * 1024;

/**
 * A paused job lists the runs its workers park in `parkedRuns`, on its own item. Runs keep coming
 * up while it is paused (its queued occurrences, retries, and replays, which api.md invites for
 * many dead letters of one job), and the item, with the largest definition the API accepts, must
 * stay under DynamoDB's 400 KB.
 */
describe("the runs a paused job lists for its resume", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const runsOf = async (jobId: string) => (await f.runs()).filter((r) => r.jobId === jobId);
  const deliver = (run: Run, engine: Engine = f.engine) =>
    processRun({ ...f.workerDeps("w"), engine }, deliveryOfRun(engine, run));
  const itemOf = async (jobId: string) =>
    (
      await f.engine.doc.send(
        new GetCommand({
          TableName: f.engine.tables.jobs,
          Key: jobKey(jobId),
          ConsistentRead: true,
        }),
      )
    ).Item ?? {};
  /** Parked entries as workers write them: a run id of the job, and when it was parked. */
  const parkedEntries = (jobId: string, count: number, from = 0) =>
    Object.fromEntries(
      Array.from({ length: count }, (_, i) => [
        runId(jobId, new Date(Date.UTC(2020, 0, 1) + (from + i) * 1000), 2),
        new Date().toISOString(),
      ]),
    );
  /**
   * The job's item rewritten with `fields` (what time and the API's largest input grow it to), and
   * without the attributes `without`.
   */
  const rewrite = async (
    jobId: string,
    fields: Record<string, unknown>,
    without: readonly string[] = [],
  ) => {
    const kept = Object.entries(await itemOf(jobId)).filter(([name]) => !without.includes(name));
    await f.engine.doc.send(
      new PutCommand({
        TableName: f.engine.tables.jobs,
        Item: { ...Object.fromEntries(kept), ...fields },
      }),
    );
  };
  /**
   * The largest definition the API accepts: a payload of 64 KiB serialized (a create or an edit)
   * and target headers filling another edit's 80 KiB body; 1,000 jobs after it; its most runs
   * listed as under way, with their admission marks.
   */
  const largestDefinition = (jobId: string) => ({
    name: "n".repeat(200),
    payloadJson: JSON.stringify("p".repeat(64 * 1024 - 2)),
    target: {
      url: "https://example.com/hook",
      headers: Object.fromEntries(
        Array.from({ length: 20 }, (_, i) => [`x-header-${10 + i}`, "v".repeat(4_070)]),
      ),
    },
    dependents: new Set(
      Array.from({ length: 1_000 }, (_, i) => `01J9Z3V6K8N4QX2M7R5T${String(i).padStart(6, "0")}`),
    ),
    activeRuns: Object.fromEntries(
      Array.from({ length: MAX_LISTED_RUNS }, (_, i) => [
        runId(jobId, new Date(Date.UTC(2021, 0, 1) + i * 1000), 1),
        new Date(Date.UTC(2021, 0, 1)).toISOString(),
      ]),
    ),
    // Each listed run's admission mark, and the buffered run's and the waiting rerun's.
    admissionMarks: Object.fromEntries(
      Array.from({ length: MAX_LISTED_RUNS + 2 }, (_, i) => [
        runId(jobId, new Date(Date.UTC(2021, 0, 1) + i * 1000), 1),
        randomBytes(9).toString("base64url"),
      ]),
    ),
  });

  /** A one-off due in a minute, its run claimed at create, paused before its run is delivered. */
  const pausedOneOff = async () => {
    const runAt = new Date(Date.now() + 60_000);
    const { job } = await createJob(
      f.engine,
      testJob({ schedule: { runAt: runAt.toISOString() } }),
    );
    const [claimed] = await runsOf(job.jobId);
    if (!claimed) throw new Error("not claimed at create");
    await pauseJob(f.engine, TENANT, job.jobId);
    return { job, runAt, claimed };
  };

  it("holds the largest definition, 1,000 dependents, its most listed runs and its most parked runs under 400 KB", async () => {
    const { job, runAt, claimed } = await pausedOneOff();
    await rewrite(job.jobId, {
      ...largestDefinition(job.jobId),
      parkedRuns: parkedEntries(job.jobId, MAX_PARKED_RUNS - 1),
    });
    // The last place is taken by a run's park: the item, at its largest, is written.
    await deliver(claimed, engineAt(f.engine, runAt.getTime()));
    const parked = (await getJob(f.engine, job.jobId))?.parkedRuns ?? {};
    expect(Object.keys(parked)).toHaveLength(MAX_PARKED_RUNS);
    expect(parked[claimed.runId]).toBeDefined();
    const size = Buffer.byteLength(JSON.stringify(await itemOf(job.jobId)));
    expect(size).toBeLessThan(ITEM_LIMIT_BYTES);
  }, 60_000);

  it("leaves a run that comes up once the list is full waiting with its reaper deadline, and runs it after the resume", async () => {
    const { job, runAt, claimed } = await pausedOneOff();
    // Filled to DynamoDB's edge: as many parked runs as the item takes beside the definition.
    const fits = async (count: number) => {
      try {
        await rewrite(job.jobId, {
          ...largestDefinition(job.jobId),
          parkedRuns: parkedEntries(job.jobId, count),
        });
        return true;
      } catch (error) {
        if (error instanceof Error && error.name === "ValidationException") return false;
        throw error;
      }
    };
    let [low, high] = [0, 8_000];
    while (high - low > 1) {
      const middle = Math.floor((low + high) / 2);
      if (await fits(middle)) low = middle;
      else high = middle;
    }
    const count = low;
    expect(await fits(count)).toBe(true);
    expect(count).toBeGreaterThan(MAX_PARKED_RUNS);

    const warned: { message: string; fields: Record<string, unknown> }[] = [];
    const at = engineAt(f.engine, runAt.getTime());
    const watched: Engine = {
      ...at,
      obs: {
        ...at.obs,
        log: {
          ...at.obs.log,
          warn: (message, fields = {}) => void warned.push({ message, fields }),
        },
      },
    };
    const worked = await Promise.race([
      deliver(claimed, watched),
      new Promise<"stuck">((resolve) => setTimeout(() => resolve("stuck"), 10_000)),
    ]);
    expect(worked).toBe("ack");
    // Named as every line about a run is, its attempt included.
    expect(
      warned.find((l) => l.message.startsWith("a paused job lists its most runs"))?.fields,
    ).toMatchObject({
      tenantId: claimed.tenantId,
      jobId: claimed.jobId,
      runId: claimed.runId,
      attempt: claimed.attempt,
    });
    const waiting = await getRun(f.engine, claimed);
    expect(waiting).toMatchObject({ status: "QUEUED", reason: "waiting: job paused" });
    expect(waiting?.parkedFence).toBe(claimed.fence + 1);
    expect((await getJob(f.engine, job.jobId))?.parkedRuns[claimed.runId]).toBeUndefined();
    // Sent again at the reaper's longest interval, not every lease, while the job stays paused.
    const { Item: runItem } = await f.engine.doc.send(
      new GetCommand({
        TableName: f.engine.tables.runs,
        Key: runKeyOf(claimed),
        ConsistentRead: true,
      }),
    );
    expect(Date.parse(String(runItem?.inflightSk))).toBeGreaterThanOrEqual(
      runAt.getTime() + 15 * 60_000,
    );

    // The resume does not send it (it is not listed): the reaper does, at its deadline. The list
    // was filled to the item's edge for the park above to fail; the resume re-arms each listed run
    // with a request of its own, and re-arming the thousands of made-up ids (runs that do not
    // exist) was half this case's time. A few of them stay listed, beside the largest definition,
    // so the resume still walks a list that leaves this run out.
    await rewrite(job.jobId, { parkedRuns: parkedEntries(job.jobId, 20) });
    await resumeJob(f.engine, TENANT, job.jobId);
    // Its 1,000 dependents (made-up ids) stand for the item's size: the run's ending would trigger
    // each of them, two requests a dependent, none of which this case is about.
    await rewrite(job.jobId, {}, ["dependents"]);
    const later = engineAt(f.engine, runAt.getTime() + 20 * 60_000);
    expect((await reap(later)).resent).toBeGreaterThanOrEqual(1);
    const delivery = await f.nextDelivery(f.engine.queues.normal, job.jobId);
    await processRun({ ...f.workerDeps("w"), engine: later }, delivery);
    expect((await getRun(f.engine, claimed))?.status).toBe("SUCCEEDED");
  }, 120_000);

  it("lists a run on a paused job whose item has no list yet (paused before jobs carried one)", async () => {
    const { job, runAt, claimed } = await pausedOneOff();
    const { parkedRuns: _none, ...withoutList } = await itemOf(job.jobId);
    await f.engine.doc.send(new PutCommand({ TableName: f.engine.tables.jobs, Item: withoutList }));
    await deliver(claimed, engineAt(f.engine, runAt.getTime()));
    expect(Object.keys((await getJob(f.engine, job.jobId))?.parkedRuns ?? {})).toEqual([
      claimed.runId,
    ]);
  }, 30_000);
});
