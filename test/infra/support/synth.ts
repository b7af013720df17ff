import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type App, CfnElement, type Stack } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import type { IConstruct } from "constructs";
import { buildSchedulerApp } from "../../../infra/build-app.js";
import type { SchedulerStack } from "../../../infra/scheduler-stack.js";
import { REPO_ROOT } from "./repo-root.js";
import { isObject, type JsonObject } from "./template-json.js";

export interface CfnResourceJson {
  readonly Type: string;
  readonly Properties?: JsonObject;
  readonly DeletionPolicy?: string;
  readonly UpdateReplacePolicy?: string;
  readonly Metadata?: JsonObject;
  readonly DependsOn?: string | readonly string[];
}

/** The context that has CDK bundle no stack's assets. */
const UNBUNDLED = { "aws:cdk:bundling-stacks": [] };

export interface Synthesized {
  readonly app: App;
  readonly stack: SchedulerStack;
  readonly template: Template;
  readonly resources: Readonly<Record<string, CfnResourceJson>>;
  readonly outdir: string;
}

/** The feature flags cdk.json gives the CLI, so tests synthesize exactly what `cdk synth` does. */
function cdkJsonContext(): Record<string, unknown> {
  const parsed: unknown = JSON.parse(readFileSync(join(REPO_ROOT, "cdk.json"), "utf8"));
  if (typeof parsed !== "object" || parsed === null || !("context" in parsed)) return {};
  const context = parsed.context;
  return typeof context === "object" && context !== null ? { ...context } : {};
}

/**
 * Builds and synthesizes the app once per named context, without bundling the functions (their
 * code assets are placeholders): the files that use it read templates and constructs, and
 * synth-offline reads the bundles `cdk synth` writes.
 */
export function synthesizeVariants<K extends string>(
  variants: Readonly<Record<K, Readonly<Record<string, string>>>>,
): { readonly variants: Readonly<Record<K, Synthesized>>; dispose(): void } {
  const outdir = mkdtempSync(join(tmpdir(), "scheduler-cdk-"));
  const entries = Object.entries<Readonly<Record<string, string>>>(variants).map(
    ([name, context]) => [name, synthesizeInto(outdir, { ...context, ...UNBUNDLED })] as const,
  );
  return {
    variants: Object.fromEntries(entries) as Record<K, Synthesized>,
    dispose: () => rmSync(outdir, { recursive: true, force: true }),
  };
}

/**
 * Synthesizes one app without bundling the functions (their code assets are
 * placeholders): for tests that read the template, not the bundles.
 */
export function synthesizeUnbundled(context: Readonly<Record<string, string>> = {}): {
  readonly synth: Synthesized;
  dispose(): void;
} {
  const outdir = mkdtempSync(join(tmpdir(), "scheduler-cdk-"));
  return {
    synth: synthesizeInto(outdir, { ...context, ...UNBUNDLED }),
    dispose: () => rmSync(outdir, { recursive: true, force: true }),
  };
}

function synthesizeInto(outdir: string, context: Readonly<Record<string, unknown>>): Synthesized {
  const { app, stack } = buildSchedulerApp({
    context: { ...cdkJsonContext(), ...context },
    outdir,
    // CDK's built-in template validator costs ~9 s per synth; the CLI synth test runs it.
    builtinCloudFormationValidation: false,
  });
  const template = Template.fromStack(stack);
  const json: unknown = template.toJSON();
  const resources = isObject(json) && isObject(json.Resources) ? json.Resources : {};
  return {
    app,
    stack,
    template,
    resources: resources as unknown as Record<string, CfnResourceJson>,
    outdir,
  };
}

export function logicalIdOf(stack: Stack, construct: IConstruct): string {
  const child = construct.node.defaultChild;
  if (!CfnElement.isCfnElement(child)) {
    throw new Error(`${construct.node.path} has no CloudFormation resource`);
  }
  return stack.getLogicalId(child);
}

export function resourceOf(synth: Synthesized, construct: IConstruct): CfnResourceJson {
  const id = logicalIdOf(synth.stack, construct);
  const resource = synth.resources[id];
  if (!resource) throw new Error(`no resource ${id} in the template`);
  return resource;
}

export function propertiesOf(synth: Synthesized, construct: IConstruct): JsonObject {
  return resourceOf(synth, construct).Properties ?? {};
}

export function resourcesOfType(synth: Synthesized, type: string): [string, CfnResourceJson][] {
  return Object.entries(synth.resources).filter(([, r]) => r.Type === type);
}
