import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { logicalIdOf, type Synthesized, synthesizeUnbundled } from "./support/synth.js";
import { asArray, isObject, type Json } from "./support/template-json.js";

/**
 * CloudFormation refuses a template whose resources depend on each other in a circle ("Circular
 * dependency between resources"), at `cdk deploy`, which `cdk synth` and the tests that read the
 * template never meet. The stack has edges that could close one: the worker's environment names
 * the API's URL (async targets call it), while the API function is updated after the worker
 * (DependsOn, docs/deploy.md "Upgrade and rollback"). Each variant's resource graph (provisioned tables' auto scaling included), references
 * (`Ref`, `Fn::GetAtt`, `Fn::Sub`) and `DependsOn` alike, must be acyclic.
 */

const CONTEXTS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  dev: { stage: "dev" },
  prod: { stage: "prod", alarmEmail: "ops@example.com", tracing: "true" },
  jwt: {
    stage: "jwt",
    jwtIssuer: "https://issuer.example.com",
    jwtAudience: "scheduler",
    alarmTopicArn: "arn:aws:sns:eu-west-1:123456789012:ops",
  },
  // Each table and index gets a scalable target and its scaling policies.
  provisioned: { stage: "prov", tableCapacity: "provisioned" },
};
const variants = new Map<string, Synthesized>();
const disposals: (() => void)[] = [];

beforeAll(() => {
  for (const [name, context] of Object.entries(CONTEXTS)) {
    const { synth, dispose } = synthesizeUnbundled(context);
    variants.set(name, synth);
    disposals.push(dispose);
  }
});
afterAll(() => {
  for (const dispose of disposals) dispose();
});

/** The resources a value refers to, of those in `ids`. */
function referencesIn(value: Json | undefined, ids: ReadonlySet<string>, out: Set<string>): void {
  if (Array.isArray(value)) {
    for (const item of value) referencesIn(item, ids, out);
    return;
  }
  if (!isObject(value)) return;
  const ref = value.Ref;
  if (typeof ref === "string" && ids.has(ref)) out.add(ref);
  const getAtt = value["Fn::GetAtt"];
  const target = Array.isArray(getAtt) ? getAtt[0] : undefined;
  if (typeof target === "string" && ids.has(target)) out.add(target);
  const sub = value["Fn::Sub"];
  const template = typeof sub === "string" ? sub : Array.isArray(sub) ? sub[0] : undefined;
  if (typeof template === "string") {
    for (const match of template.matchAll(/\$\{([A-Za-z0-9]+)[.}]/g)) {
      if (ids.has(match[1] ?? "")) out.add(match[1] ?? "");
    }
  }
  for (const item of Object.values(value)) referencesIn(item, ids, out);
}

/** One circle of dependencies, as `A -> B -> A`, or null when there is none. */
function dependencyCycle(resources: Synthesized["resources"]): string | null {
  const ids = new Set(Object.keys(resources));
  const edges = new Map<string, Set<string>>();
  for (const [id, resource] of Object.entries(resources)) {
    const out = new Set<string>();
    referencesIn(resource.Properties, ids, out);
    for (const dependency of asArray(resource.DependsOn as Json | undefined)) {
      if (typeof dependency === "string") out.add(dependency);
    }
    edges.set(id, out);
  }
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (id: string): string | null => {
    const at = path.indexOf(id);
    if (at >= 0) return [...path.slice(at), id].join(" -> ");
    if (done.has(id)) return null;
    path.push(id);
    for (const next of edges.get(id) ?? []) {
      const cycle = visit(next);
      if (cycle !== null) return cycle;
    }
    path.pop();
    done.add(id);
    return null;
  };
  for (const id of edges.keys()) {
    const cycle = visit(id);
    if (cycle !== null) return cycle;
  }
  return null;
}

describe("the template's resource graph", () => {
  it("has the edges the update order and async targets make, and one more would close a circle", () => {
    const prod = variants.get("prod");
    if (!prod) throw new Error("no prod variant");
    const ids = new Set(Object.keys(prod.resources));
    const api = logicalIdOf(prod.stack, prod.stack.api.handler.fn);
    const worker = logicalIdOf(prod.stack, prod.stack.worker.worker.fn);
    const workerRefs = new Set<string>();
    referencesIn(prod.resources[worker]?.Properties, ids, workerRefs);
    expect(workerRefs).toContain(logicalIdOf(prod.stack, prod.stack.api.httpApi));
    expect(asArray(prod.resources[api]?.DependsOn as Json | undefined)).toContain(worker);
    // The worker made to wait for the API function as well: the circle the check is for.
    const workerResource = prod.resources[worker];
    if (!workerResource) throw new Error("no worker function");
    const closed = { ...prod.resources, [worker]: { ...workerResource, DependsOn: [api] } };
    const cycle = dependencyCycle(closed) ?? "";
    expect(cycle.split(" -> ")).toEqual(expect.arrayContaining([worker, api]));
  });

  it.each(Object.keys(CONTEXTS))("has no circular dependency (%s)", (name) => {
    const synth = variants.get(name);
    if (!synth) throw new Error(`no ${name} variant`);
    expect(dependencyCycle(synth.resources)).toBeNull();
  });
});
