import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { handlerEntry } from "../../infra/constructs/scheduler-function.js";
import { type Bindings, type Grant, isAllowed, resolveValue } from "./support/iam-evaluator.js";
import { COMPONENTS, grantsOfRole, roleOfComponent } from "./support/iam-policy.js";
import { type ReachableCall, reachableCalls } from "./support/reachable-calls.js";
import { logicalIdOf, type Synthesized, synthesizeUnbundled } from "./support/synth.js";

/**
 * IAM conformance from the code's side: iam-conformance.test.ts checks the calls its steps make,
 * which leaves out a path no step drives (a run that waited half a retention, a rare failure's
 * repair). Here every AWS call left in a handler's tree-shaken bundle, however rarely reached, must
 * be one its role allows: on the table and index it names, or, where its input names none, on
 * some table of the stack.
 */

let synth: Synthesized;
let dispose = () => {};
/** Unbound: a table's ARN reads `<unbound GetAtt StorageJobsTable….Arn>`, as its grants do. */
const unbound: Bindings = { partition: "aws", region: "r", account: "a", resources: new Map() };

beforeAll(() => {
  ({ synth, dispose } = synthesizeUnbundled({ demoJobTypes: "true", quotaConcurrentRuns: "100" }));
});
afterAll(() => dispose());

function tableArns(): Record<string, string> {
  const { storage } = synth.stack;
  const arnOf = (declared: typeof storage.jobs) =>
    resolveValue({ "Fn::GetAtt": [logicalIdOf(synth.stack, declared.table), "Arn"] }, unbound);
  return {
    jobs: arnOf(storage.jobs),
    runs: arnOf(storage.runs),
    webhookSecrets: arnOf(storage.webhookSecrets),
  };
}

function refusals(grants: readonly Grant[], calls: readonly ReachableCall[]): string[] {
  const arns = tableArns();
  const found = new Set<string>();
  for (const call of calls) {
    const where = `(${call.site})`;
    if (call.table !== null) {
      const arn = arns[call.table];
      if (arn === undefined) {
        found.add(`${call.action} on a table the stack does not have: ${call.table} ${where}`);
        continue;
      }
      const resource = call.index === null ? arn : `${arn}/index/${call.index}`;
      const named = call.index === null ? call.table : `${call.table}, index ${call.index}`;
      if (!isAllowed(grants, call.action, resource)) {
        found.add(`${call.action} on ${named} is not allowed ${where}`);
      }
    } else if (call.action.startsWith("dynamodb:")) {
      if (!Object.values(arns).some((arn) => isAllowed(grants, call.action, arn))) {
        found.add(`${call.action} on no table is allowed ${where}`);
      }
    } else if (
      !grants.some((grant) => grant.condition === undefined && grant.actions.includes(call.action))
    ) {
      found.add(`${call.action} is not allowed on anything ${where}`);
    }
  }
  return [...found].sort();
}

describe("every AWS call a handler's bundle can make", () => {
  it.each(COMPONENTS)("%s's role allows it", async (component) => {
    const calls = await reachableCalls(handlerEntry(component));
    // The reading found the calls at all: every handler reads or writes the jobs table.
    expect(calls.some((call) => call.table === "jobs")).toBe(true);
    const grants = grantsOfRole(synth, roleOfComponent(synth, component), unbound);
    expect(refusals(grants, calls)).toEqual([]);
  });

  it("is found, with its table, where a transaction item's input is built apart", async () => {
    // run-finish.ts, run-end-unowned.ts and job-create.ts write `{ Update: runUpdate }`,
    // `{ Update: update }`, `{ Put: putJob }`: the reading follows each to its literal.
    const calls = (await reachableCalls(handlerEntry("api"))).map(
      (call) => `${call.action} ${call.table} (${call.site})`,
    );
    expect(calls).toEqual(
      expect.arrayContaining([
        "dynamodb:UpdateItem runs (shared/storage/run-finish.ts finishRun (a transaction item))",
        "dynamodb:UpdateItem runs (shared/storage/run-end-unowned.ts endRunAsSeen (a transaction item))",
        "dynamodb:PutItem jobs (shared/storage/job-create.ts writeNewJob (a transaction item))",
      ]),
    );
  });

  it("reports a call its role lacks, naming the table and where the code sends it", async () => {
    // The tick's role without GetItem on the jobs table, as it was before its reaper's
    // keepCompletedJobForWaitingRun was granted the read it makes.
    const grants = grantsOfRole(synth, roleOfComponent(synth, "tick"), unbound).map((grant) => ({
      ...grant,
      actions: grant.actions.filter((action) => action !== "dynamodb:GetItem"),
    }));
    expect(refusals(grants, await reachableCalls(handlerEntry("tick")))).toContain(
      "dynamodb:GetItem on jobs is not allowed (shared/storage/job-status.ts keepCompletedJobForWaitingRun)",
    );
  });
});
