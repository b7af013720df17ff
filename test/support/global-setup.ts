import type { TestProject } from "vitest/node";
import {
  startDynamoDbLocal,
  startSqsEmulator,
  type TimedEmulator,
} from "../../infra/sandbox/emulators.js";
import { endpointFromEnv } from "../../shared/aws.js";

interface Target {
  endpoint: string;
  emulator?: TimedEmulator;
}

async function target(fromEnv: string | undefined, start: () => Promise<TimedEmulator>) {
  if (fromEnv) return { endpoint: fromEnv } satisfies Target;
  const emulator = await start();
  return { endpoint: emulator.endpoint, emulator } satisfies Target;
}

/**
 * Starts DynamoDB Local and fauxqs once per `vitest run` and provides their
 * endpoints. An endpoint in the environment (AWS_ENDPOINT_URL, or the
 * per-service AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SQS, the same
 * precedence the SDK uses) replaces the matching emulator, so the same suites
 * run against LocalStack or AWS.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const env = process.env;

  const [dynamo, sqs] = await Promise.allSettled([
    target(endpointFromEnv("DYNAMODB", env), startDynamoDbLocal),
    target(endpointFromEnv("SQS", env), startSqsEmulator),
  ]);
  const emulators = [dynamo, sqs].flatMap((result) =>
    result.status === "fulfilled" && result.value.emulator !== undefined
      ? [result.value.emulator]
      : [],
  );
  const teardown = async () => {
    await Promise.all(emulators.map((emulator) => emulator.stop()));
  };
  if (dynamo.status === "rejected" || sqs.status === "rejected") {
    await teardown();
    const failures = [dynamo, sqs].flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    throw failures.length === 1 ? failures[0] : new AggregateError(failures, "emulators failed");
  }

  project.provide("dynamoEndpoint", dynamo.value.endpoint);
  project.provide("sqsEndpoint", sqs.value.endpoint);
  project.provide("awsTarget", emulators.length === 2 ? "emulators" : "environment");
  if (env.EMULATOR_TIMINGS) {
    // Opt-in, to re-measure startup after an emulator or JVM upgrade.
    const timings = emulators.map((e) => `${e.name} ${Math.round(e.startupMs)} ms`).join(", ");
    console.info(`emulators ready: ${timings}`);
  }
  return teardown;
}
