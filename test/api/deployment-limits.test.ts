import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineEnvironment, resolveSettings } from "../../infra/settings.js";
import { type LocalServer, startLocalServer } from "../../shared/api/local-server.js";
import { loadSettings } from "../../shared/config.js";
import { sweepShard } from "../../shared/dispatch/dispatcher.js";
import type { Engine } from "../../shared/engine.js";
import { shardOf } from "../../shared/keys.js";
import { engineAt } from "../support/engine-fixture.js";
import {
  type ApiHarness,
  expectError,
  inMinutes,
  JOB_TYPES,
  KEY_A,
  laterJob,
  startApi,
  TENANT_A,
} from "./support.js";

/** The engine settings a deployed API reads from the environment its stack sets. */
const deployed = (workerTimeoutSeconds?: number) =>
  loadSettings(engineEnvironment(resolveSettings({ workerTimeoutSeconds })));

describe("job timeouts the deployment's workers cannot finish", () => {
  let api: ApiHarness;
  let short: ApiHarness;
  beforeAll(async () => {
    [api, short] = await Promise.all([
      startApi({ settings: deployed() }),
      startApi({ settings: deployed(120) }),
    ]);
  });
  afterAll(() => Promise.all([api.close(), short.close()]));

  it("refuses 891 to 900 s with the default 900 s worker, naming the field and the maximum", async () => {
    for (const timeoutSeconds of [891, 900]) {
      const error = expectError(
        await api.call("POST", "/jobs", { body: laterJob({ timeoutSeconds }) }),
        400,
        { code: "validation_failed", field: "timeoutSeconds" },
      );
      expect(error.message).toMatch(/at most 885\b/);
    }
    const longest = await api.call("POST", "/jobs", { body: laterJob({ timeoutSeconds: 885 }) });
    expect(longest.status, longest.text).toBe(201);
  });

  it("follows the worker's configured timeout, on create and on edit, and for an http delivery's timeout", async () => {
    expectError(
      await short.call("POST", "/jobs", { body: laterJob({ timeoutSeconds: 106 }) }),
      400,
      { field: "timeoutSeconds" },
    );
    expectError(
      await short.call("POST", "/jobs", {
        body: laterJob({
          type: "http",
          target: { url: "https://example.com/hook", timeoutSeconds: 106 },
        }),
      }),
      400,
      { field: "target.timeoutSeconds" },
    );
    // Without a timeout, the default (300 s) gives way to what the deployment can run.
    const created = await short.call("POST", "/jobs", { body: laterJob() });
    expect(created.status, created.text).toBe(201);
    const job = created.body as { id: string; timeoutSeconds: number; version: number };
    expect(job.timeoutSeconds).toBe(105);

    const edit = (timeoutSeconds: number) =>
      short.call("PATCH", `/jobs/${job.id}`, {
        body: { timeoutSeconds },
        headers: { "If-Match": `"${job.version}"` },
      });
    expectError(await edit(106), 400, { field: "timeoutSeconds" });
    const edited = await edit(60);
    expect(edited.status, edited.text).toBe(200);
    expect((edited.body as { timeoutSeconds: number }).timeoutSeconds).toBe(60);
  });
});

/**
 * `minIntervalMs` is checked where a schedule is given (a create, an edit of the schedule), never
 * against the schedules already stored: a deploy that raises it leaves the jobs that fire more often
 * running as they were, and editable in everything but their schedule.
 */
describe("a minIntervalMs raised above the interval of jobs already there", () => {
  let api: ApiHarness;
  let raised: LocalServer;
  const raisedSettings = (engine: Engine): Engine => ({
    ...engine,
    settings: { ...engine.settings, minIntervalMs: 120_000 },
  });
  beforeAll(async () => {
    api = await startApi({ settings: deployed() });
    raised = await startLocalServer({
      engine: raisedSettings(api.fixture.engine),
      jobTypes: JOB_TYPES,
      env: { SCHEDULER_API_KEYS: `${KEY_A}=${TENANT_A}` },
    });
  });
  afterAll(async () => {
    await raised.close();
    await api.close();
  });

  const onRaised = (method: string, path: string, body: unknown, headers = {}) =>
    fetch(`${raised.url}${path}`, {
      method,
      headers: { Authorization: `Bearer ${KEY_A}`, "Content-Type": "application/json", ...headers },
      body: JSON.stringify(body),
    });

  it("keeps claiming them, lets an edit of anything else through and refuses their schedule again with a 400 naming it", async () => {
    const startAt = inMinutes(24 * 60);
    const created = await api.call("POST", "/jobs", {
      body: { type: "noop", schedule: { every: "PT1M", startAt } },
    });
    expect(created.status, created.text).toBe(201);
    const job = created.body as { id: string; version: number };

    const renamed = await onRaised(
      "PATCH",
      `/jobs/${job.id}`,
      { name: "renamed" },
      { "If-Match": `"${job.version}"` },
    );
    expect(renamed.status, await renamed.clone().text()).toBe(200);
    const edited = (await renamed.json()) as { version: number };

    const again = await onRaised(
      "PATCH",
      `/jobs/${job.id}`,
      { schedule: { every: "PT1M", startAt } },
      { "If-Match": `"${edited.version}"` },
    );
    const refused = await again.json();
    expect({ status: again.status, body: refused }).toMatchObject({
      status: 400,
      body: {
        error: {
          code: "validation_failed",
          field: expect.stringMatching(/^schedule/),
          message: expect.stringMatching(/more often than the minimum interval/),
        },
      },
    });

    // A dispatcher of the new deploy claims the stored schedule's occurrences as before.
    const [stored] = (await api.fixture.jobs()).filter((j) => j.jobId === job.id);
    const dueAt = new Date(stored?.nextRunAt ?? "");
    const dispatcher = engineAt(raisedSettings(api.fixture.engine), dueAt.getTime());
    const shard = shardOf(job.id, dispatcher.settings.shardCount);
    await sweepShard(dispatcher, shard, {
      from: dueAt,
      to: dueAt,
      now: dueAt,
      horizonEnd: new Date(dueAt.getTime() + 60_000),
    });
    const runs = (await api.fixture.runs()).filter((r) => r.jobId === job.id);
    expect(runs.length).toBeGreaterThan(1);
    expect(
      runs
        .map((r) => r.scheduledFor)
        .sort()
        .slice(0, 2),
    ).toEqual([dueAt.toISOString(), new Date(dueAt.getTime() + 60_000).toISOString()]);
  });
});
