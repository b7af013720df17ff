import {
  CreateTableCommand,
  type CreateTableCommandInput,
  DescribeTableCommand,
  type DynamoDBClient,
  ResourceNotFoundException,
  UpdateTimeToLiveCommand,
} from "@aws-sdk/client-dynamodb";
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { ENV } from "../../shared/config.js";
import type { Priority } from "../../shared/model.js";
import { PRIORITIES } from "../../shared/model.js";
import type { QueueUrls } from "../../shared/queue/work-queue.js";
import type { TableNames } from "../../shared/storage/tables.js";

/** The part of a CloudFormation template the sandbox reads. */
export interface Template {
  readonly Resources: Record<
    string,
    { readonly Type: string; readonly Properties?: Record<string, unknown> }
  >;
}

interface QueuePlan {
  readonly logicalId: string;
  readonly attributes: Record<string, string>;
  /** The logical id of the queue this one redrives to, with its maxReceiveCount. */
  readonly redrive?: { readonly target: string; readonly maxReceiveCount: number };
}

/** What the sandbox creates, read from the synthesized stack so local and deployed cannot drift. */
export interface ResourcePlan {
  readonly tables: {
    readonly jobs: CreateTableCommandInput;
    readonly runs: CreateTableCommandInput;
    readonly webhookSecrets: CreateTableCommandInput;
  };
  readonly ttl: { readonly jobs?: string; readonly runs?: string };
  readonly workQueues: Readonly<Record<Priority, QueuePlan>>;
  readonly deadLetterQueues: readonly QueuePlan[];
  /** The worker function's plain-string environment: shard count, lookahead, lease, and so on. */
  readonly settingsEnv: Readonly<Record<string, string>>;
}

function refOf(value: unknown, what: string): string {
  const ref = (value as { Ref?: unknown } | undefined)?.Ref;
  if (typeof ref !== "string") throw new Error(`${what} is not a Ref in the template`);
  return ref;
}

function resource(template: Template, logicalId: string, type: string) {
  const found = template.Resources[logicalId];
  if (!found || found.Type !== type) throw new Error(`template has no ${type} ${logicalId}`);
  return found.Properties ?? {};
}

export function planFromTemplate(template: Template): ResourcePlan {
  const worker = Object.values(template.Resources).find(
    (r) =>
      r.Type === "AWS::Lambda::Function" &&
      (r.Properties?.Environment as { Variables?: Record<string, unknown> } | undefined)
        ?.Variables?.[ENV.allowPrivateTargets] !== undefined,
  );
  const env = (
    worker?.Properties?.Environment as { Variables?: Record<string, unknown> } | undefined
  )?.Variables;
  if (!env) throw new Error("template has no worker function with an environment");

  const table = (variable: string): { input: CreateTableCommandInput; ttl?: string } => {
    const props = resource(template, refOf(env[variable], variable), "AWS::DynamoDB::Table");
    const ttl = props.TimeToLiveSpecification as
      | { AttributeName?: string; Enabled?: boolean }
      | undefined;
    const input = {
      TableName: "",
      BillingMode: "PAY_PER_REQUEST",
      KeySchema: props.KeySchema,
      AttributeDefinitions: props.AttributeDefinitions,
      ...(props.GlobalSecondaryIndexes
        ? { GlobalSecondaryIndexes: props.GlobalSecondaryIndexes }
        : {}),
    } as CreateTableCommandInput;
    return { input, ...(ttl?.Enabled && ttl.AttributeName ? { ttl: ttl.AttributeName } : {}) };
  };

  const queue = (logicalId: string): QueuePlan => {
    const props = resource(template, logicalId, "AWS::SQS::Queue");
    const attributes: Record<string, string> = {};
    for (const key of [
      "VisibilityTimeout",
      "MessageRetentionPeriod",
      "DelaySeconds",
      "ReceiveMessageWaitTimeSeconds",
    ]) {
      if (props[key] !== undefined) attributes[key] = String(props[key]);
    }
    const redrive = props.RedrivePolicy as
      | { deadLetterTargetArn?: { "Fn::GetAtt"?: [string, string] }; maxReceiveCount?: number }
      | undefined;
    const target = redrive?.deadLetterTargetArn?.["Fn::GetAtt"]?.[0];
    return {
      logicalId,
      attributes,
      ...(target ? { redrive: { target, maxReceiveCount: redrive?.maxReceiveCount ?? 5 } } : {}),
    };
  };

  const queueVariable: Record<Priority, string> = {
    high: ENV.queueHigh,
    normal: ENV.queueNormal,
    low: ENV.queueLow,
  };
  const workQueues = Object.fromEntries(
    PRIORITIES.map((p) => [p, queue(refOf(env[queueVariable[p]], queueVariable[p]))]),
  ) as Record<Priority, QueuePlan>;
  const dlqIds = [...new Set(PRIORITIES.flatMap((p) => workQueues[p].redrive?.target ?? []))];
  const jobs = table(ENV.jobsTable);
  const runs = table(ENV.runsTable);
  const webhookSecrets = table(ENV.webhookSecretsTable);
  return {
    tables: { jobs: jobs.input, runs: runs.input, webhookSecrets: webhookSecrets.input },
    ttl: { ...(jobs.ttl ? { jobs: jobs.ttl } : {}), ...(runs.ttl ? { runs: runs.ttl } : {}) },
    workQueues,
    deadLetterQueues: dlqIds.map(queue),
    settingsEnv: Object.fromEntries(
      Object.entries(env).filter((e): e is [string, string] => typeof e[1] === "string"),
    ),
  };
}

export interface ProvisionedResources {
  readonly tables: TableNames;
  readonly queues: QueueUrls;
  readonly deadLetterQueues: readonly string[];
}

/**
 * Creates what the plan names, under `prefix`: tables only when missing (their data persists across
 * sandbox restarts), queues always (CreateQueue is idempotent; the emulator's queues live in memory).
 */
export async function provision(
  clients: { dynamo: DynamoDBClient; sqs: SQSClient },
  plan: ResourcePlan,
  prefix: string,
): Promise<ProvisionedResources> {
  const jobs = await ensureTable(
    clients.dynamo,
    { ...plan.tables.jobs, TableName: `${prefix}-jobs` },
    plan.ttl.jobs,
  );
  const runs = await ensureTable(
    clients.dynamo,
    { ...plan.tables.runs, TableName: `${prefix}-runs` },
    plan.ttl.runs,
  );
  const webhookSecrets = await ensureTable(clients.dynamo, {
    ...plan.tables.webhookSecrets,
    TableName: `${prefix}-webhook-secrets`,
  });
  const arns = new Map<string, { url: string; arn: string }>();
  const create = async (q: QueuePlan, name: string) => {
    const target = q.redrive ? arns.get(q.redrive.target) : undefined;
    const attributes = {
      ...q.attributes,
      ...(q.redrive && target
        ? {
            RedrivePolicy: JSON.stringify({
              deadLetterTargetArn: target.arn,
              maxReceiveCount: q.redrive.maxReceiveCount,
            }),
          }
        : {}),
    };
    const { QueueUrl } = await clients.sqs.send(
      new CreateQueueCommand({ QueueName: name, Attributes: attributes }),
    );
    if (!QueueUrl) throw new Error(`CreateQueue ${name} returned no URL`);
    const { Attributes } = await clients.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["QueueArn"] }),
    );
    const created = { url: QueueUrl, arn: Attributes?.QueueArn ?? "" };
    arns.set(q.logicalId, created);
    return created;
  };
  const deadLetterQueues: string[] = [];
  for (const [i, q] of plan.deadLetterQueues.entries()) {
    deadLetterQueues.push((await create(q, `${prefix}-dlq-${i}`)).url);
  }
  const queues = {} as Record<Priority, string>;
  for (const p of PRIORITIES) queues[p] = (await create(plan.workQueues[p], `${prefix}-${p}`)).url;
  return { tables: { jobs, runs, webhookSecrets }, queues, deadLetterQueues };
}

async function ensureTable(
  dynamo: DynamoDBClient,
  input: CreateTableCommandInput,
  ttl?: string,
): Promise<string> {
  const name = input.TableName ?? "";
  try {
    await dynamo.send(new DescribeTableCommand({ TableName: name }));
    return name;
  } catch (error) {
    if (!(error instanceof ResourceNotFoundException)) throw error;
  }
  await dynamo.send(new CreateTableCommand(input));
  if (ttl) {
    await dynamo.send(
      new UpdateTimeToLiveCommand({
        TableName: name,
        TimeToLiveSpecification: { AttributeName: ttl, Enabled: true },
      }),
    );
  }
  return name;
}
