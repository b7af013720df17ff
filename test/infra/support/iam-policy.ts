import type { Component } from "../../../infra/lambda-environment.js";
import { type Bindings, type Grant, resolveValue } from "./iam-evaluator.js";
import { logicalIdOf, type Synthesized } from "./synth.js";
import { asArray, isObject, type Json, referencedId } from "./template-json.js";

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
