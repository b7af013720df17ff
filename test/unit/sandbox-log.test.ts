import { describe, expect, it } from "vitest";
import { sandboxObservability } from "../../infra/sandbox/sandbox.js";
import { actedOn } from "../support/terminal-text.js";

describe("the sandbox's log lines", () => {
  // A run's error quotes its webhook receiver's answer, which the tenant's server writes.
  const hostile = "HTTP 500 \u001b]0;owned\u0007\u009b2J\u202etxt.exe\u2028next line";

  it("print a finished run's error with nothing a terminal acts on, as escapes", () => {
    const lines: string[] = [];
    sandboxObservability((line) => lines.push(line)).log.info("run finished", {
      status: "FAILED",
      jobId: "j1",
      scheduledFor: "2026-12-03T00:00:00.000Z",
      attempt: 1,
      lagMs: 3,
      durationMs: 5,
      error: hostile,
    });
    expect(lines).toHaveLength(1);
    expect(actedOn(lines[0])).toEqual([]);
    expect(lines[0]).toContain(
      "HTTP 500 \\u001b]0;owned\\u0007\\u009b2J\\u202etxt.exe\\u2028next line",
    );
  });

  it("print a warning's and an error's fields with nothing a terminal acts on", () => {
    const lines: string[] = [];
    const { log } = sandboxObservability((line) => lines.push(line));
    log.warn("webhook refused", { reason: hostile });
    log.error("run failed", { error: hostile });
    expect(lines).toHaveLength(2);
    for (const line of lines) expect(actedOn(line)).toEqual([]);
  });
});
