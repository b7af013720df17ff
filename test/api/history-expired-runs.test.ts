import { DeleteCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunPageSchema } from "../../shared/api/schemas/runs.js";
import { runKey } from "../../shared/storage/runs.js";
import { type ApiHarness, startApi } from "./support.js";

/**
 * docs/api.md ("Deleting a job"): a deleted job's history answers its tenant until its runs
 * expire and are deleted. Expiry is DynamoDB's TTL, which deletes an item within days of its
 * `expiresAt`; the history's reads do not check `expiresAt` (docs/architecture.md, Known limits:
 * "A run past its retention is still read until TTL deletes it"), so the history is a 404 once
 * TTL has deleted the last run, not at the instant it expires.
 */
const T0 = Date.parse("2030-03-01T00:00:00.000Z");
const DAY = 86_400_000;
let now = new Date(T0);
let api: ApiHarness;

beforeAll(async () => {
  api = await startApi({ clock: () => now });
});
afterAll(() => api.close());

describe("a deleted job's history once every run has expired", () => {
  it("is listed until TTL deletes the runs, and a 404 after", async () => {
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { cron: "* * * * *", timezone: "UTC" } },
    });
    expect(created.status, created.text).toBe(201);
    const jobId = JobSchema.parse(created.body).id;
    const runs = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`)).body).items;
    expect(runs.length).toBeGreaterThan(0);
    expect((await api.call("DELETE", `/jobs/${jobId}`)).status).toBe(204);
    const oneRunPath = `/jobs/${jobId}/runs/${runs[0]?.runId ?? ""}`;

    // Every run was written at T0 or at the delete's cancel, also at T0: 31 days on, all expired.
    now = new Date(T0 + (api.fixture.engine.settings.retentionDays + 1) * DAY);
    const expired = {
      history: (await api.call("GET", `/jobs/${jobId}/runs`)).status,
      oneRun: (await api.call("GET", oneRunPath)).status,
    };
    expect(expired).toEqual({ history: 200, oneRun: 200 });

    // TTL's deletes, as DynamoDB makes them once it comes round to the expired items.
    const { doc, tables } = api.fixture.engine;
    for (const run of (await api.fixture.runs()).filter((r) => r.jobId === jobId))
      await doc.send(
        new DeleteCommand({
          TableName: tables.runs,
          Key: runKey(run.jobId, run.scheduledFor, run.attempt),
        }),
      );
    const deleted = {
      history: (await api.call("GET", `/jobs/${jobId}/runs`)).status,
      oneRun: (await api.call("GET", oneRunPath)).status,
    };
    expect(deleted).toEqual({ history: 404, oneRun: 404 });
  });
});
