import { isObject, type Json } from "./template-json.js";

/**
 * The IAM evaluator: template values resolved against a deployment's bindings, and whether a
 * resolved grant allows a call. Apart from iam-policy.ts, which reads roles out of a synthesized
 * stack, so that its unit test loads no CDK.
 */

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
  /** The template's `Conditions`, which `Fn::If` names. */
  readonly conditions?: Readonly<Record<string, Json>>;
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
      "AWS::URLSuffix": bindings.partition === "aws-cn" ? "amazonaws.com.cn" : "amazonaws.com",
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
  const ifThen = value["Fn::If"];
  if (Array.isArray(ifThen) && typeof ifThen[0] === "string") {
    return resolveValue(conditionHolds(ifThen[0], bindings) ? ifThen[1] : ifThen[2], bindings);
  }
  return `<unresolvable ${JSON.stringify(value)}>`;
}

/** A template condition, named, evaluated as CloudFormation does against the bindings. */
function conditionHolds(name: string, bindings: Bindings): boolean {
  const holds = (expression: Json | undefined): boolean => {
    if (isObject(expression)) {
      const [operator, operands] = Object.entries(expression)[0] ?? [];
      const list = Array.isArray(operands) ? operands : [];
      if (operator === "Fn::Equals")
        return resolveValue(list[0], bindings) === resolveValue(list[1], bindings);
      if (operator === "Fn::Not") return !holds(list[0]);
      if (operator === "Fn::And") return list.every(holds);
      if (operator === "Fn::Or") return list.some(holds);
      if (operator === "Condition" && typeof operands === "string")
        return conditionHolds(operands, bindings);
    }
    throw new Error(`condition ${name}: cannot evaluate ${JSON.stringify(expression)}`);
  };
  const expression = bindings.conditions?.[name];
  if (expression === undefined) throw new Error(`no condition ${name} in the bindings`);
  return holds(expression);
}

/** One Allow statement of a role's policies, resolved to plain strings. */
export interface Grant {
  readonly policy: string;
  readonly actions: readonly string[];
  readonly resources: readonly string[];
  /** The statement's Condition block, if any: such a grant is never taken to allow a call here. */
  readonly condition?: Json;
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
