import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_SETTINGS } from "../../shared/config.js";
import { REPO_ROOT } from "./support/repo-root.js";
import {
  logicalIdOf,
  resourcesOfType,
  type Synthesized,
  synthesizeUnbundled,
} from "./support/synth.js";
import { isObject, referencedId } from "./support/template-json.js";

/**
 * Figures the docs give an operator about a default stack, which they size quotas, budgets and
 * spikes by: docs/deploy.md's Lambda concurrency the worker's event sources may take
 * (Prerequisites) and fixed monthly parts of the bill (What it costs), and docs/scaling.md's
 * worker pool for a spike. Each is read from the default template here.
 */

let synth: Synthesized;
let dispose = () => {};
const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8").replace(/\s+/g, " ");
const scaling = readFileSync(join(REPO_ROOT, "docs", "scaling.md"), "utf8").replace(/\s+/g, " ");

beforeAll(() => {
  ({ synth, dispose } = synthesizeUnbundled({ stage: "prod" }));
});
afterAll(() => dispose());

/** The worker's event sources' MaximumConcurrency, high, normal and low. */
function workerMaximums(): number[] {
  const { high, normal, low } = synth.stack.queues.work;
  const mappings = resourcesOfType(synth, "AWS::Lambda::EventSourceMapping");
  return [high, normal, low].map((queue) => {
    const id = logicalIdOf(synth.stack, queue);
    const mapping = mappings.find(
      ([, resource]) => referencedId(resource.Properties?.EventSourceArn) === id,
    );
    const scaling = mapping?.[1].Properties?.ScalingConfig;
    return Number(isObject(scaling) ? scaling.MaximumConcurrency : Number.NaN);
  });
}

describe("docs/deploy.md's figures for a default stack", () => {
  it("names the worker's event sources' maximums, high + normal + low (Prerequisites)", () => {
    const stated = /event sources' maximums \((\d+) \+ (\d+) \+ (\d+) by default\)/.exec(deploy);
    expect(stated?.slice(1).map(Number)).toEqual(workerMaximums());
  });

  it("counts the dispatcher passes, the queues long-polled and the Contributor Insights rules (What it costs)", () => {
    const stated =
      /(\d+) dispatcher passes and a tick a minute .*? long polling of (\w+) queues .*? (\w+) Contributor Insights rules/.exec(
        deploy,
      );
    const words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"];
    const count = (text: string | undefined) =>
      /^\d+$/.test(text ?? "") ? Number(text) : words.indexOf(text ?? "");
    expect([count(stated?.[1]), count(stated?.[2]), count(stated?.[3])]).toEqual([
      DEFAULT_SETTINGS.shardCount,
      resourcesOfType(synth, "AWS::Lambda::EventSourceMapping").length,
      resourcesOfType(synth, "AWS::CloudWatch::InsightRule").length,
    ]);
  });
});

/**
 * docs/scaling.md sized the 00:00 spike "With the defaults (1,250 workers, 40,000 WRU/s per
 * table)", concluding a p99 lag of about 50 s for 1,000,000 runs, where the stack's default caps
 * the normal queue's event source (a job's priority unless given) at 20 concurrent invocations:
 * an operator planning by that figure was an order of magnitude out.
 */
describe("docs/scaling.md's figures for a default stack", () => {
  it("name the worker concurrency the stack deploys by default for a normal-priority job", () => {
    const stated = /With the defaults \(([\d,]+) workers on the normal queue/.exec(scaling)?.[1];
    expect(stated).toBeDefined();
    expect(Number(stated?.replaceAll(",", ""))).toBe(workerMaximums()[1]);
  });
});
