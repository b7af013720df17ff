import { ENV } from "../shared/config.js";

/** One folder per function under functions/, each with a `handler.ts` exporting `handler`. */
export type Component = "api" | "tick" | "dispatcher" | "worker" | "dlq";

/**
 * The Powertools service name of each function. The handlers pass the same
 * literal to `powertoolsObservability`, and Powertools Metrics adds it to
 * every metric as the `service` dimension, so alarms must name it exactly
 * (test/infra checks both sides agree).
 */
export const SERVICE_NAMES: Readonly<Record<Component, string>> = {
  api: "scheduler-api",
  tick: "scheduler-tick",
  dispatcher: "scheduler-dispatcher",
  worker: "scheduler-worker",
  dlq: "scheduler-dlq",
};

/** What every function's environment holds before its own variables: Powertools' two. */
export function functionEnvironment<V>(
  component: Component,
  metricsNamespace: string,
  variables: Readonly<Record<string, V>>,
): Record<string, string | V> {
  return {
    POWERTOOLS_SERVICE_NAME: SERVICE_NAMES[component],
    POWERTOOLS_METRICS_NAMESPACE: metricsNamespace,
    ...variables,
  };
}

/**
 * Lambda refuses a function whose environment variables together pass 4 KB: CreateFunction or
 * UpdateFunctionConfiguration fails, and the deploy with it, naming no setting.
 */
export const LAMBDA_ENVIRONMENT_LIMIT_BYTES = 4096;

/** A variable's value known at deploy alone (a token at synth), by the most bytes it can hold. */
export interface DeployTimeValue {
  readonly mostBytes: number;
}

/**
 * A table's name, which CloudFormation makes up (the stack names none): DynamoDB's longest table
 * name, 255 characters, whatever the stack and logical ids make of it.
 */
const TABLE_NAME: DeployTimeValue = { mostBytes: 255 };

/**
 * A queue's URL (its Ref): `https://sqs.<region>.<the partition's DNS suffix>/<account>/<name>`,
 * counted with 32 characters each for the region and the suffix (the longest today are 14 and 16,
 * `ap-southeast-4`, `amazonaws.com.cn`), the account's 12 digits and SQS's longest queue name, 80.
 */
const QUEUE_URL: DeployTimeValue = {
  mostBytes: "https://sqs.".length + 32 + 1 + 32 + 1 + 12 + 1 + 80,
};

/**
 * The variables the stack sets to a table's name or a work queue's URL (what engineFromEnv
 * requires of every engine-backed function), each by the most it can hold. test/infra checks that
 * they are exactly the synthesized functions' token-valued variables.
 */
export const DEPLOY_TIME_VARIABLES: Readonly<Record<string, DeployTimeValue>> = {
  [ENV.jobsTable]: TABLE_NAME,
  [ENV.runsTable]: TABLE_NAME,
  [ENV.webhookSecretsTable]: TABLE_NAME,
  [ENV.queueHigh]: QUEUE_URL,
  [ENV.queueNormal]: QUEUE_URL,
  [ENV.queueLow]: QUEUE_URL,
};

/**
 * The most bytes an environment can take as Lambda counts it, its deploy-time values at their
 * longest. Lambda's documentation gives the limit as the variables' total size; this counts them
 * written as a JSON object (each key and value quoted, with the colons, commas and braces), which
 * is more than their keys and values alone: where Lambda counts less, the synth refuses early
 * rather than the deploy failing.
 */
export function environmentBytes(
  variables: Readonly<Record<string, string | DeployTimeValue>>,
): number {
  const written = Object.fromEntries(
    Object.entries(variables).map(([key, value]) => [
      key,
      typeof value === "string" ? value : "x".repeat(value.mostBytes),
    ]),
  );
  return Buffer.byteLength(JSON.stringify(written));
}
