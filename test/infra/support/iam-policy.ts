import type { Component } from "../../../infra/constructs/scheduler-function.js";
import {
  asArray,
  isObject,
  type Json,
  logicalIdOf,
  referencedId,
  type Synthesized,
} from "./synth.js";

export const COMPONENTS: readonly Component[] = ["api", "tick", "dispatcher", "worker", "dlq"];

export function functionsOf(synth: Synthesized) {
  const { stack } = synth;
  return [
    ["api", stack.api.handler],
    ["tick", stack.dispatch.tick],
    ["dispatcher", stack.dispatch.dispatcher],
    ["worker", stack.worker.worker],
    ["dlq", stack.worker.deadLetterConsumer],
  ] as const;
}

/**
 * What `Ref` and `Fn::GetAtt` of a template resource stand for in a
 * deployment: for an emulated table, its name and the emulator's ARN; for a
 * queue, its URL and ARN; and so on. Values not bound resolve to a marker
 * that no policy resource matches except a bare `*`.
 */
export interface Bindings {
  readonly partition: string;
  readonly region: string;
  readonly account: string;
  /** Logical id → `Ref` value and attribute values (`Arn`, `QueueName`…). */
  readonly resources: ReadonlyMap<string, { ref: string; attributes: Record<string, string> }>;
}

/** A template value with its intrinsic functions evaluated against the bindings. */
export function resolveValue(value: Json | undefined, bindings: Bindings): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (!isObject(value)) return `<unresolvable ${JSON.stringify(value)}>`;
  const ref = value.Ref;
  if (typeof ref === "string") {
    const pseudo: Record<string, string> = {
      "AWS::Partition": bindings.partition,
      "AWS::Region": bindings.region,
      "AWS::AccountId": bindings.account,
      "AWS::URLSuffix": "amazonaws.com",
    };
    return pseudo[ref] ?? bindings.resources.get(ref)?.ref ?? `<unbound Ref ${ref}>`;
  }
  const getAtt = value["Fn::GetAtt"];
  if (Array.isArray(getAtt)) {
    const [id, attribute] = getAtt;
    const bound = typeof id === "string" ? bindings.resources.get(id) : undefined;
    return (
      (typeof attribute === "string" ? bound?.attributes[attribute] : undefined) ??
      `<unbound GetAtt ${String(id)}.${String(attribute)}>`
    );
  }
  const join = value["Fn::Join"];
  if (Array.isArray(join) && typeof join[0] === "string" && Array.isArray(join[1])) {
    return join[1].map((part) => resolveValue(part, bindings)).join(join[0]);
  }
  const sub = value["Fn::Sub"];
  if (typeof sub === "string") {
    return sub.replace(/\$\{([^}]+)\}/g, (_, name: string) => {
      const [id = "", attribute] = name.split(".");
      return resolveValue(attribute ? { "Fn::GetAtt": [id, attribute] } : { Ref: id }, bindings);
    });
  }
  return `<unresolvable ${JSON.stringify(value)}>`;
}

/** One Allow statement of a role's policies, resolved to plain strings. */
export interface Grant {
  readonly policy: string;
  readonly actions: readonly string[];
  readonly resources: readonly string[];
  /** The statement's Condition block, if any: such a grant is never taken to allow a call here. */
  readonly condition?: Json;
}

/**
 * Every Allow statement attached to a role: its AWS::IAM::Policy resources
 * and inline policies. What this evaluator cannot read faithfully (Deny,
 * NotAction, NotResource, managed policies) throws, so a change that needs a
 * richer evaluator cannot pass unnoticed. A statement with a Condition is
 * kept with it, and `allows` never counts it: a condition only narrows a
 * grant, so a call that needs it is reported, never let through wrongly.
 */
export function grantsOfRole(synth: Synthesized, roleId: string, bindings: Bindings): Grant[] {
  const role = synth.resources[roleId];
  if (role?.Type !== "AWS::IAM::Role") throw new Error(`${roleId} is not a role in the template`);
  if (role.Properties?.ManagedPolicyArns !== undefined) {
    throw new Error(`role ${roleId} has managed policies, which this evaluator cannot read`);
  }
  const documents: [string, Json | undefined][] = asArray(role.Properties?.Policies).map(
    (inline, i) => [`${roleId} inline ${i}`, isObject(inline) ? inline.PolicyDocument : undefined],
  );
  for (const [id, resource] of Object.entries(synth.resources)) {
    if (resource.Type !== "AWS::IAM::Policy") continue;
    const roles = asArray(resource.Properties?.Roles).map((r) => referencedId(r));
    if (roles.includes(roleId)) documents.push([id, resource.Properties?.PolicyDocument]);
  }
  return documents.flatMap(([policy, document]) =>
    asArray(isObject(document) ? document.Statement : undefined).map((statement) => {
      if (!isObject(statement)) throw new Error(`${policy}: a statement is not an object`);
      const unsupported = ["NotAction", "NotResource", "NotPrincipal"].filter(
        (key) => key in statement,
      );
      if (statement.Effect !== "Allow" || unsupported.length > 0) {
        throw new Error(
          `${policy}: a statement this evaluator cannot read (${statement.Effect} ${unsupported.join(" ")})`,
        );
      }
      return {
        policy,
        actions: asArray(statement.Action).map((a) => resolveValue(a, bindings)),
        resources: asArray(statement.Resource).map((r) => resolveValue(r, bindings)),
        ...(statement.Condition !== undefined ? { condition: statement.Condition } : {}),
      };
    }),
  );
}

/** The role of a function resource, from its `Role: { "Fn::GetAtt": [role, "Arn"] }`. */
function roleOfFunction(synth: Synthesized, functionId: string): string {
  const role = referencedId(synth.resources[functionId]?.Properties?.Role);
  if (role === null) throw new Error(`function ${functionId} has no role in the template`);
  return role;
}

export function roleOfComponent(synth: Synthesized, component: Component): string {
  const fn = functionsOf(synth).find(([c]) => c === component)?.[1];
  if (fn === undefined) throw new Error(`no function ${component}`);
  return roleOfFunction(synth, logicalIdOf(synth.stack, fn.fn));
}

/** IAM's wildcards: `*` is any run of characters, `?` any one character. */
function wildcardPattern(pattern: string, flags: string): RegExp {
  const body = pattern
    .split("")
    .map((c) => (c === "*" ? ".*" : c === "?" ? "." : c.replace(/[.+^${}()|[\]\\/-]/g, "\\$&")))
    .join("");
  return new RegExp(`^${body}$`, flags);
}

/** Action names are case-insensitive in IAM; resource ARNs are not. */
export function allows(grant: Grant, action: string, resource: string): boolean {
  return (
    grant.condition === undefined &&
    grant.actions.some((a) => wildcardPattern(a, "i").test(action)) &&
    grant.resources.some((r) => wildcardPattern(r, "").test(resource))
  );
}

export function isAllowed(grants: readonly Grant[], action: string, resource: string): boolean {
  return grants.some((grant) => allows(grant, action, resource));
}
