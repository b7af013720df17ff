import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { handlerEntry } from "../../infra/constructs/scheduler-function.js";
import type { Component } from "../../infra/lambda-environment.js";
import { COMPONENTS } from "./support/iam-policy.js";
import { treeShakenBundle } from "./support/reachable-calls.js";
import { REPO_ROOT } from "./support/repo-root.js";
import { propertiesOf, type Synthesized, synthesizeUnbundled } from "./support/synth.js";

/**
 * docs/deploy.md's alarm table tells an operator, for each alarm, which function's log group to
 * read and which lines to look for there ("The dispatcher's log group: "dispatcher pass
 * failed; …""). Each line it quotes must be one that function can log: a message renamed in the
 * code, or moved to another function, would leave the operator searching for a line that never
 * comes. A clause of a cell (between semicolons) that names a log group (`The tick's log group:`,
 * `the dispatcher's:`) quotes that function's lines, in double quotes or in backticks with a
 * space, outside parentheses; Lambda's own ("Task timed out") are not the code's.
 */

/** How the table names each function, as `<name>'s log group:` or `<name>'s:`. */
const OWNERS: Readonly<Record<string, Component>> = {
  "DLQ consumer": "dlq",
  "API function": "api",
  dispatcher: "dispatcher",
  worker: "worker",
  tick: "tick",
};
const LAMBDA_LINES: readonly string[] = ["Task timed out", "Runtime exited"];

interface QuotedLine {
  readonly alarm: string;
  readonly owner: Component;
  readonly line: string;
}

/** The alarm table's rows, each split into its cells. */
function alarmRows(): string[][] {
  const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8");
  const section = deploy.split(/^### Alarms$/m)[1]?.split(/^###? /m)[0] ?? "";
  return section
    .split("\n")
    .filter((row) => row.startsWith("| `"))
    .map((row) => row.split("|").map((cell) => cell.trim()));
}

function quotedLines(): QuotedLine[] {
  const rows = alarmRows();
  const logGroup = new RegExp(`\\b(${Object.keys(OWNERS).join("|")})'s(?: log group)?:`);
  // Left to right, a backtick span first: `filter runId = "<runId>"` is one span, not a quote.
  const quote = /`([^`]*)`|"([^"]+)"/g;
  const found: QuotedLine[] = [];
  for (const [, alarm = "", , where = ""] of rows) {
    // Semicolons outside quotes end a clause ("reaper could not re-send runs; it tries …" is one).
    const clauses = where.replace(/\([^()]*\)/g, "").split(/;(?=(?:[^"]*"[^"]*")*[^"]*$)/);
    for (const clause of clauses) {
      const named = logGroup.exec(clause)?.[1];
      const owner = named === undefined ? undefined : OWNERS[named];
      if (owner === undefined) continue;
      for (const match of clause.matchAll(quote)) {
        const line = match[1] ?? match[2] ?? "";
        // A name (`runId`), not a line; or Lambda's own line.
        if ((match[1] !== undefined && !/\s/.test(line)) || LAMBDA_LINES.includes(line)) continue;
        found.push({ alarm, owner, line });
      }
    }
  }
  return found;
}

const bundles = new Map<Component, string>();
let synth: Synthesized;
let dispose = () => {};

beforeAll(async () => {
  for (const component of COMPONENTS) {
    bundles.set(component, await treeShakenBundle(handlerEntry(component)));
  }
  ({ synth, dispose } = synthesizeUnbundled({ stage: "prod" }));
});
afterAll(() => dispose());

describe("docs/deploy.md's alarm table", () => {
  it("quotes log lines from the log groups of the DLQ consumer, the dispatcher, the worker, the tick and the API", () => {
    const quoted = quotedLines();
    expect([...new Set(quoted.map((q) => q.owner))].sort()).toEqual([
      "api",
      "dispatcher",
      "dlq",
      "tick",
      "worker",
    ]);
    // A line holding a semicolon is read whole, and a second function's clause as its own.
    expect(quoted).toContainEqual({
      alarm: "`DispatcherErrors`",
      owner: "dispatcher",
      line: "dispatcher pass failed; the next pass starts where this one did",
    });
    expect(quoted).toContainEqual({
      alarm: "`FenceLost`",
      owner: "dispatcher",
      line: "lost the shard lease to a takeover; the pass records nothing",
    });
  });

  it("quotes only lines the function whose log group it names can log", () => {
    const missing = quotedLines().flatMap(({ alarm, owner, line }) => {
      // `…` stands for a value the line holds: each part between must be in the code.
      const parts = line
        .split("…")
        .map((part) => part.trim())
        .filter((part) => part !== "");
      const code = bundles.get(owner) ?? "";
      return parts.every((part) => code.includes(part))
        ? []
        : [`${alarm}: "${line}" is not logged by the ${owner} function`];
    });
    expect(missing).toEqual([]);
  });

  /**
   * The WorkerErrors row sent the operator of an out-of-memory worker to "the dashboard's worker
   * duration and memory", which the dashboard does not graph: Lambda publishes no memory metric
   * without Lambda Insights. Each REPORT line Lambda writes to the function's log
   * group says its invocation's Max Memory Used, which Logs Insights reads as @maxMemoryUsed.
   */
  it("sends the WorkerErrors operator to the worker's memory where it is: the REPORT lines, not the dashboard", () => {
    const body = JSON.stringify(
      propertiesOf(synth, synth.stack.observability.dashboard).DashboardBody,
    );
    const titles = [...body.matchAll(/\\"title\\":\\"([^\\]+)\\"/g)].map((m) => m[1] ?? "");
    expect(titles).toContain("Function duration p99 (ms)");
    const memoryGraphed = titles.some((title) => /memory/i.test(title));
    const where = alarmRows().find((row) => row[1] === "`WorkerErrors`")?.[3] ?? "";
    const dashboardClause = /the dashboard's [^;]*/.exec(where)?.[0] ?? "";
    if (!memoryGraphed) expect(dashboardClause).not.toMatch(/memory/i);
    expect(where).toMatch(/`stats max\(@maxMemoryUsed \/ 1000 \/ 1000\)/);
  });
});
