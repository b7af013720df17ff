import { expect } from "vitest";
import type { JobContext } from "../../shared/execution/job-contract.js";
import type { Run } from "../../shared/model.js";
import type { EngineFixture } from "./engine-fixture.js";

/** A handler that runs until `release` is called (or its signal aborts), recording each call. */
export function heldHandler() {
  const contexts: JobContext[] = [];
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const handler = async (ctx: JobContext) => {
    contexts.push(ctx);
    await Promise.race([
      released,
      new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true })),
    ]);
  };
  return { handler, contexts, release: () => release() };
}

/** The job's one run: asserts it has exactly one. */
export async function runOf(f: EngineFixture, jobId: string): Promise<Run> {
  const runs = (await f.runs()).filter((r) => r.jobId === jobId);
  expect(runs).toHaveLength(1);
  const [run] = runs;
  if (!run) throw new Error("no run");
  return run;
}
