import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stackResourcePlan } from "../../infra/sandbox/plan-cache.js";
import type { ResourcePlan } from "../../infra/sandbox/resources.js";
import { type Sandbox, startSandbox } from "../../infra/sandbox/sandbox.js";
import { sleep } from "../../shared/clock.js";
import { listRuns } from "../../shared/jobs/queries.js";
import type { Run } from "../../shared/model.js";
import { testNamespace } from "../support/namespace.js";
import { waitFor } from "../support/wait.js";

const KEY = "restart-key";
const TENANT = "restart-tenant";
const ENV = {
  SCHEDULER_API_KEYS: `${KEY}=${TENANT}`,
  // Short enough that a few seconds of downtime count as a misfire and a frozen lease lapses quickly.
  MISFIRE_GRACE_SECONDS: "2",
  LEASE_SECONDS: "6",
  LOOKAHEAD_SECONDS: "60",
};

describe("sandbox restart", () => {
  let plan: ResourcePlan;
  let dataDir: string;
  let sandbox: Sandbox | null = null;
  // The test run's DynamoDB Local keeps the tables across the restart, as the sandbox's own does on
  // disk; SQS is an emulator of the sandbox's own, whose queues a restart empties (what the
  // recovery of lost messages is for). The prefix keeps the tables this file's.
  const prefix = testNamespace("restart").id;
  const lines: string[] = [];
  // The in-flight run's webhook target: it holds the first delivery unanswered, so that the run is
  // still in progress when the sandbox stops however late the stop comes, and answers every later
  // delivery at once, so that the run's attempt after the restart waits for nothing.
  let target: Server;
  let targetUrl = "";
  let deliveries = 0;

  beforeAll(async () => {
    plan = await stackResourcePlan();
    dataDir = await mkdtemp(join(tmpdir(), "scheduler-restart-"));
    target = createServer((req, res) => {
      req.resume();
      deliveries += 1;
      if (deliveries > 1) res.writeHead(200).end("ok");
    });
    await new Promise<void>((resolve) => target.listen(0, "127.0.0.1", resolve));
    const address = target.address();
    if (address === null || typeof address !== "object") throw new Error("target has no port");
    targetUrl = `http://127.0.0.1:${address.port}/hook`;
  }, 60_000);
  afterAll(async () => {
    await sandbox?.stop();
    target.closeAllConnections();
    await new Promise((done) => target.close(done));
    await rm(dataDir, { recursive: true, force: true });
  });

  const start = () =>
    startSandbox({
      port: 0,
      dataDir,
      tickSeconds: 1,
      workers: 8,
      dynamoEndpoint: inject("dynamoEndpoint"),
      prefix,
      env: ENV,
      plan,
      print: (l) => lines.push(l),
    });

  async function api(method: string, path: string, body?: unknown) {
    if (!sandbox) throw new Error("sandbox not running");
    const response = await fetch(`${sandbox.url}${path}`, {
      method,
      headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const json = (await response.json()) as Record<string, unknown>;
    if (!response.ok)
      throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
    return json;
  }

  async function runsOf(jobId: string): Promise<Run[]> {
    if (!sandbox) throw new Error("sandbox not running");
    const page = await listRuns(sandbox.engine, jobId, { limit: 500 });
    return page.items;
  }

  it("loses nothing accepted, and what fell due while it was down follows each job's misfire policy", async () => {
    sandbox = await start();
    const inSeconds = (s: number) => new Date(Date.now() + s * 1000).toISOString();
    const startAt = inSeconds(2).replace(/\.\d{3}Z$/, ".000Z");
    // Overlap allowed, so that what the catch-up does is the misfire policy's alone.
    const perSecond = async (misfirePolicy: string) =>
      api("POST", "/jobs", {
        type: "noop",
        misfirePolicy,
        overlapPolicy: "allow",
        maxConcurrent: 50,
        schedule: { every: "PT1S", startAt },
      });
    // At once: each create claims its job's first minute of runs, sixty writes, and one after
    // another the three took 37 s of this test on a loaded machine, side by side 19 s.
    const [skip, fireOnce, fireAll] = await Promise.all([
      perSecond("skip"),
      perSecond("fire_once"),
      perSecond("fire_all"),
    ]);
    const dueWhileDown = await api("POST", "/jobs", {
      type: "noop",
      schedule: { runAt: inSeconds(8) },
    });
    // Created last, so it is in progress when the sandbox stops however slow the creates were: the
    // target holds its delivery until the stop aborts it after its 3 s grace.
    const inFlight = await api("POST", "/jobs", {
      type: "http",
      target: { url: targetUrl },
      timeoutSeconds: 60,
      schedule: { runAt: inSeconds(0) },
    });

    // Let the delivery start, then stop: the run is released back to QUEUED after the 3 s grace.
    await waitFor(
      "the webhook run to start",
      async () => (await runsOf(String(inFlight.id)))[0]?.status === "RUNNING",
      45_000,
    );
    await sandbox.stop();
    const stoppedAt = Date.now();
    sandbox = null;
    // Down for more than 7 s: the occurrences counted as due while down (below: after the stop's
    // first second, before the restart's last 3 s) span more than 3 s, so each job has at least
    // the 3 it is checked for, however quickly the sandbox starts again.
    await sleep(7000);

    sandbox = await start();
    const restartedAt = Date.now();
    expect(lines.some((l) => /recovered \d+ run\(s\) in flight/.test(l))).toBe(true);
    await waitFor(
      "the one-off and the released run to succeed",
      async () =>
        (await runsOf(String(dueWhileDown.id))).some((r) => r.status === "SUCCEEDED") &&
        (await runsOf(String(inFlight.id))).some((r) => r.status === "SUCCEEDED"),
      60_000,
    );
    // Occurrences that fell due while down, more than the 2 s grace before the restart.
    const downtime = (r: Run) =>
      Date.parse(r.scheduledFor) > stoppedAt + 1000 &&
      Date.parse(r.scheduledFor) < restartedAt - 3000;
    const byPolicy = async (job: Record<string, unknown>) =>
      (await runsOf(String(job.id))).filter(downtime);
    // fire_once: of the occurrences that start late, only the most recent runs. On a loaded machine
    // the workers start the queued occurrences behind time for a while after the restart, and each
    // one past the grace with a later one also past it is skipped: the run that catches up is the
    // first one after the downtime that is not skipped, whenever it falls.
    const sinceStop = async (job: Record<string, unknown>) =>
      (await runsOf(String(job.id)))
        .filter((r) => Date.parse(r.scheduledFor) > stoppedAt + 1000)
        .sort((a, b) => Date.parse(a.scheduledFor) - Date.parse(b.scheduledFor));
    const catchUp = (runs: Run[]) => runs.findIndex((r) => r.status !== "SKIPPED");
    const decided = (runs: Run[]) =>
      runs.every((r) => r.status !== "QUEUED" && r.status !== "RUNNING");
    await waitFor(
      "the occurrences due while down to be run or skipped, and fire_once's to catch up",
      async () => {
        const once = await sinceStop(fireOnce);
        const caughtUp = once[catchUp(once)];
        return (
          caughtUp !== undefined &&
          decided([caughtUp]) &&
          decided(await byPolicy(skip)) &&
          decided(await byPolicy(fireAll))
        );
      },
      90_000,
    );
    for (const job of [skip, fireOnce, fireAll])
      await api("POST", `/jobs/${String(job.id)}/cancel`);

    // Nothing accepted was lost: the one-off due while down ran once, the released run was finished
    // by a later fence.
    const oneOff = await runsOf(String(dueWhileDown.id));
    expect(oneOff.map((r) => r.status)).toEqual(["SUCCEEDED"]);
    const released = await runsOf(String(inFlight.id));
    expect(released).toHaveLength(1);
    expect(released[0]?.status).toBe("SUCCEEDED");
    expect(released[0]?.fence).toBeGreaterThanOrEqual(2);

    const skipped = await byPolicy(skip);
    expect(skipped.length).toBeGreaterThanOrEqual(3);
    expect(skipped.every((r) => r.status === "SKIPPED" && /^misfire: /.test(r.reason ?? ""))).toBe(
      true,
    );
    // fire_once: the occurrences due while down all had a later one past the grace, and so did
    // every one skipped until the run that caught up.
    expect((await byPolicy(fireOnce)).length).toBeGreaterThanOrEqual(3);
    const once = await sinceStop(fireOnce);
    const caughtUp = catchUp(once);
    expect(once[caughtUp]?.status).toBe("SUCCEEDED");
    expect(Date.parse(once[caughtUp]?.scheduledFor ?? "")).toBeGreaterThanOrEqual(
      restartedAt - 3000,
    );
    expect(
      once
        .slice(0, caughtUp)
        .every((r) => r.status === "SKIPPED" && /policy fire_once/.test(r.reason ?? "")),
    ).toBe(true);
    const all = await byPolicy(fireAll);
    expect(all.length).toBeGreaterThanOrEqual(3);
    expect(all.every((r) => r.status === "SUCCEEDED")).toBe(true);

    // Every occurrence has one run at most, and none that was due is left queued or running.
    for (const job of [skip, fireOnce, fireAll, dueWhileDown, inFlight]) {
      const runs = await runsOf(String(job.id));
      expect(new Set(runs.map((r) => `${r.scheduledFor}#${r.attempt}`)).size).toBe(runs.length);
      const stuck = runs.filter(
        (r) =>
          (r.status === "QUEUED" || r.status === "RUNNING") &&
          Date.parse(r.dueAt) < Date.now() - 5000,
      );
      expect(stuck).toEqual([]);
    }
  }, 240_000);
});
