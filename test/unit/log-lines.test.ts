import { afterEach, describe, expect, it, vi } from "vitest";
import { powertoolsObservability } from "../../shared/runtime.js";

/**
 * The deployed functions' log lines (Powertools Logger) are one JSON object each, whatever the
 * tenant put in their fields: a path or a name with newlines, ANSI escapes, quotes or a forged
 * JSON line stays inside its field, and the rules and filters that read `$.message` and
 * `$.tenantId` read the scheduler's, not the tenant's.
 */
describe("Lambda log lines", () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllEnvs();
  });

  it("stay one JSON object per line with tenant text in their fields", () => {
    vi.stubEnv("POWERTOOLS_DEV", "");
    const written: string[] = [];
    const capture = (chunk: unknown) => {
      written.push(String(chunk));
      return true;
    };
    vi.spyOn(process.stdout, "write").mockImplementation(capture);
    vi.spyOn(process.stderr, "write").mockImplementation(capture);
    const hostile =
      '/jobs/x\n{"level":"ERROR","message":"run finished","tenantId":"victim"}\r\u001b[2J\u001b]0;owned\u0007"}';
    const { log } = powertoolsObservability("scheduler-api");
    log.warn("request throttled", { tenantId: "tenant-a", path: hostile, reason: hostile });
    log.error("api request failed", { method: "GET", path: hostile, error: `Error: ${hostile}` });
    const lines = written
      .join("")
      .split("\n")
      .filter((line) => line !== "");
    expect(lines).toHaveLength(2);
    const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(parsed[0]).toMatchObject({
      level: "WARN",
      message: "request throttled",
      tenantId: "tenant-a",
      path: hostile,
    });
    expect(parsed[1]).toMatchObject({
      level: "ERROR",
      message: "api request failed",
      path: hostile,
    });
    // Nothing a terminal or a log viewer acts on is left raw.
    for (const line of lines)
      expect([...line].filter((ch) => (ch.codePointAt(0) ?? 0) < 0x20)).toEqual([]);
  });
});
