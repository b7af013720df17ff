import type { IConstruct } from "constructs";
import type { Component } from "../../../infra/constructs/scheduler-function.js";
import { PRIORITIES } from "../../../shared/model.js";
import {
  asArray,
  isObject,
  type Json,
  logicalIdOf,
  referencedId,
  resourcesOfType,
  type Synthesized,
} from "./synth.js";

export const COMPONENTS: readonly Component[] = ["api", "tick", "dispatcher", "worker", "dlq"];

/** Names for the stack's resources, so policies read as "dynamodb:Query on runs/index/inflight". */
export function resourceLabels(synth: Synthesized): Map<string, string> {
  const { stack } = synth;
  const labels = new Map<string, string>();
  const label = (construct: IConstruct, name: string) =>
    labels.set(logicalIdOf(stack, construct), name);
  label(stack.storage.jobs.table, "jobs");
  label(stack.storage.runs.table, "runs");
  for (const priority of PRIORITIES) {
    label(stack.queues.work[priority], `work:${priority}`);
    label(stack.queues.deadLetters[priority], `dlq:${priority}`);
  }
  label(stack.queues.asyncFailures, "asyncFailures");
  label(stack.worker.webhookSecret, "webhookSecret");
  for (const [component, fn] of functionsOf(synth)) {
    label(fn.fn, `function:${component}`);
    label(fn.logGroup, `logs:${component}`);
  }
  return labels;
}

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

function renderResource(value: Json, labels: Map<string, string>): string {
  if (value === "*") return "*";
  const id = referencedId(value);
  if (id !== null) return labels.get(id) ?? `unknown:${id}`;
  if (isObject(value)) {
    const join = value["Fn::Join"];
    if (Array.isArray(join) && join[0] === "" && Array.isArray(join[1])) {
      return join[1]
        .map((part) => (typeof part === "string" ? part : renderResource(part, labels)))
        .join("");
    }
  }
  return JSON.stringify(value);
}

/**
 * Every "action on resource" pair the role of each function is allowed, from
 * all IAM policies attached to it. Deny statements would break this reading,
 * so their presence fails loudly.
 */
export function grantsByComponent(synth: Synthesized): Map<Component, Set<string>> {
  const labels = resourceLabels(synth);
  const roleOf = new Map<string, Component>();
  for (const [component, fn] of functionsOf(synth)) {
    roleOf.set(logicalIdOf(synth.stack, fn.role), component);
  }
  const grants = new Map<Component, Set<string>>(COMPONENTS.map((c) => [c, new Set<string>()]));
  for (const [id, policy] of resourcesOfType(synth, "AWS::IAM::Policy")) {
    const properties = policy.Properties ?? {};
    const roles = asArray(properties.Roles).map((role) => referencedId(role));
    const document = properties.PolicyDocument;
    const statements = isObject(document) ? asArray(document.Statement) : [];
    for (const roleId of roles) {
      const component = roleId === null ? undefined : roleOf.get(roleId);
      if (component === undefined) throw new Error(`policy ${id} is attached to an unknown role`);
      const set = grants.get(component);
      for (const statement of statements) {
        if (!isObject(statement)) continue;
        if (statement.Effect !== "Allow") throw new Error(`policy ${id} has a non-Allow statement`);
        for (const action of asArray(statement.Action)) {
          for (const resource of asArray(statement.Resource)) {
            set?.add(`${String(action)} on ${renderResource(resource, labels)}`);
          }
        }
      }
    }
  }
  return grants;
}

/** "a, b on x" shorthand → the pairs it stands for. */
export function pairs(actions: readonly string[], resources: readonly string[]): string[] {
  return resources.flatMap((resource) => actions.map((action) => `${action} on ${resource}`));
}
