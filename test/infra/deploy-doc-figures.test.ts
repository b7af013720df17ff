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
 * Figures docs/deploy.md gives an operator about a default stack, which they size quotas and
 * budgets by: the Lambda concurrency the worker's event sources may take (Prerequisites) and the
 * fixed monthly parts of the bill (What it costs). Each is read from the default template here.
 */

let synth: Synthesized;
let dispose = () => {};
const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8").replace(/\s+/g, " ");

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
