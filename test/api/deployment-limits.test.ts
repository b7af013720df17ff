import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineEnvironment, resolveSettings } from "../../infra/settings.js";
import { loadSettings } from "../../shared/config.js";
import { type ApiHarness, expectError, laterJob, startApi } from "./support.js";

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
