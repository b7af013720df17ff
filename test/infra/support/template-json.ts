/**
 * Reading a synthesized template's JSON. Apart from synth.ts, which loads aws-cdk-lib and the
 * whole of infra/, so that a test of template values alone (the IAM evaluator's unit test) does
 * not load them.
 */

/** A CloudFormation value as it appears in a synthesized template. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `{ Ref: id }` or `{ "Fn::GetAtt": [id, attr] }` → id; anything else → null. */
export function referencedId(value: Json | undefined): string | null {
  if (!isObject(value)) return null;
  const ref = value.Ref;
  if (typeof ref === "string") return ref;
  const getAtt = value["Fn::GetAtt"];
  if (Array.isArray(getAtt) && typeof getAtt[0] === "string") return getAtt[0];
  return null;
}

export function asArray(value: Json | undefined): Json[] {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}
