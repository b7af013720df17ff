import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Engine } from "../../shared/engine.js";
import { cancelJob, createJob, editJob, pauseJob, resumeJob } from "../../shared/jobs/index.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { createEngineFixture, type EngineFixture, testJob } from "../support/engine-fixture.js";
import { createTestClients } from "../support/namespace.js";

const TENANT = "tenant-a";
const MINUTE = 60_000;

/** A paused job keeps its pending occurrence whatever an edit does to its end; the resume applies the end in force then. */
describe("a paused job's end applied at its resume", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());
  const at = (instant: number): Engine => ({ ...f.engine, clock: () => new Date(instant) });
  const jobFrom = async (endAt: number, t0: number) =>
    (
      await createJob(
        at(t0),
        testJob({
          type: "noop",
          schedule: { every: "PT1M", startAt: new Date(t0).toISOString() },
          endAt: new Date(endAt).toISOString(),
        }),
      )
    ).job.jobId;
  const occurrences = async (jobId: string) =>
    (await f.runs())
      .filter((r) => r.jobId === jobId && r.status !== "SKIPPED")
      .map((r) => Date.parse(r.scheduledFor));

  it("resumed past its endAt: the last occurrence up to the end runs, none after it, and the job completes", async () => {
    const t0 = Math.ceil((Date.now() + 30 * MINUTE) / MINUTE) * MINUTE;
    const jobId = await jobFrom(t0 + 20 * MINUTE, t0);
    await pauseJob(at(t0 + 5_000), TENANT, jobId);
    await resumeJob(at(t0 + 60 * MINUTE), TENANT, jobId);
    const job = await getJob(f.engine, jobId);
    const ran = await occurrences(jobId);
    expect({
      status: job?.status,
      last: Math.max(...ran) - t0,
      afterEnd: ran.filter((t) => t > t0 + 20 * MINUTE).length,
    }).toEqual({ status: "COMPLETED", last: 20 * MINUTE, afterEnd: 0 });
  });

  it("an end lowered past the pending occurrence while paused, then the job cancelled: nothing more is queued", async () => {
    const t0 = Math.ceil((Date.now() + 90 * MINUTE) / MINUTE) * MINUTE;
    const jobId = await jobFrom(t0 + 60 * MINUTE, t0);
    await pauseJob(at(t0 + 5_000), TENANT, jobId);
    await editJob(at(t0 + 10_000), TENANT, jobId, 1, {
      endAt: new Date(t0 + 5 * MINUTE).toISOString(),
    });
    const paused = await getJob(f.engine, jobId);
    const before = (await occurrences(jobId)).length;
    await cancelJob(at(t0 + 15_000), TENANT, jobId);
    const job = await getJob(f.engine, jobId);
    expect({
      pausedNext: paused?.nextRunAt,
      status: job?.status,
      next: job?.nextRunAt,
      entries: (await f.dueEntries()).filter((e) => e.jobId === jobId).length,
      more: (await occurrences(jobId)).length - before,
    }).toEqual({
      pausedNext: new Date(t0 + 14 * MINUTE).toISOString(),
      status: "CANCELLED",
      next: null,
      entries: 0,
      more: 0,
    });
  });

  it("a resume racing an edit that lifts the end it would complete the job at: the job goes on", async () => {
    const t0 = Math.ceil((Date.now() + 150 * MINUTE) / MINUTE) * MINUTE;
    const jobId = await jobFrom(t0 + 60 * MINUTE, t0);
    await pauseJob(at(t0 + 5_000), TENANT, jobId);
    // Lowered below the pending occurrence (minute 14): the resume would complete the job.
    await editJob(at(t0 + 10_000), TENANT, jobId, 1, {
      endAt: new Date(t0 + 5 * MINUTE).toISOString(),
    });
    // The edit lifting it lands between the resume's read and its write.
    const clients = createTestClients({ maxSockets: 16 });
    let lifted = false;
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (!lifted && (context.commandName ?? "").startsWith("TransactWriteItems")) {
          lifted = true;
          await editJob(at(t0 + 20_000), TENANT, jobId, 2, { endAt: null });
        }
        return next(args);
      },
      { step: "initialize", name: "editBeforeResumeWrite" },
    );
    try {
      await resumeJob({ ...at(t0 + 20_000), doc: clients.doc }, TENANT, jobId);
    } finally {
      clients.destroy();
    }
    const job = await getJob(f.engine, jobId);
    expect({
      lifted,
      status: job?.status,
      endAt: job?.endAt ?? null,
      next: job?.nextRunAt,
      entries: (await f.dueEntries()).filter((e) => e.jobId === jobId).length,
    }).toEqual({
      lifted: true,
      status: "ACTIVE",
      endAt: null,
      next: expect.any(String),
      entries: 1,
    });
  });
});
