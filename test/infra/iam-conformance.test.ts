import type { CreateTableCommandInput } from "@aws-sdk/client-dynamodb";
import { DescribeTableCommand } from "@aws-sdk/client-dynamodb";
import {
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
} from "@aws-sdk/client-sqs";
import {
  DeleteCommand,
  GetCommand,
  PutCommand,
  ScanCommand,
  UpdateCommand,
} from "@aws-sdk/lib-dynamodb";
import { CfnElement } from "aws-cdk-lib";
import type { Context } from "aws-lambda";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import type { Component } from "../../infra/lambda-environment.js";
import { sleep } from "../../shared/clock.js";
import { loadSettings } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { admitRun } from "../../shared/execution/admission.js";
import { issueRunToken } from "../../shared/execution/async-delivery.js";
import { cancelJob, createJob } from "../../shared/jobs/index.js";
import { newJobId, runId, shardOf } from "../../shared/keys.js";
import type { DueEntry, Run } from "../../shared/model.js";
import { MetricsRecorder, silentObservability } from "../../shared/observability.js";
import { decodeRunMessage, encodeRunMessage } from "../../shared/queue/work-queue.js";
import { dueEntryKey } from "../../shared/storage/due-entries.js";
import {
  decodeDueEntry,
  decodeRun,
  encodeDueEntry,
  jobKey,
  runMessageOf,
} from "../../shared/storage/items.js";
import { getJob } from "../../shared/storage/run-reads.js";
import { takeRunSlot } from "../../shared/storage/run-slots.js";
import { startRun } from "../../shared/storage/run-start.js";
import { queuedRun } from "../../shared/storage/runs.js";
import { triggerEntryOf } from "../../shared/storage/trigger.js";
import { testJob } from "../support/engine-fixture.js";
import {
  httpApiEvent,
  type LambdaIdentity,
  lambdaContext,
  type ReceivedMessage,
  scheduledEvent,
  sqsEvent,
} from "../support/lambda-events.js";
import {
  createQueue,
  createTable,
  createTestClients,
  deleteQueue,
  deleteTable,
  type TestClients,
  testNamespace,
} from "../support/namespace.js";
import { waitFor } from "../support/wait.js";
import { type AwsCallRecorder, type RecordedCall, recordAwsCalls } from "./support/aws-calls.js";
import { allows, type Bindings, isAllowed, resolveValue } from "./support/iam-evaluator.js";
import { COMPONENTS, functionsOf, grantsOfRole, roleOfComponent } from "./support/iam-policy.js";
import { logicalIdOf, type Synthesized, synthesizeUnbundled } from "./support/synth.js";
import { isObject } from "./support/template-json.js";

/**
 * IAM conformance: each Lambda handler runs through its exported entry point
 * with the events Lambda gives it, against DynamoDB Local and the SQS
 * emulator, with the environment the synthesized stack gives that function.
 * Every AWS call it makes is recorded (action and resource ARN, index
 * included) and checked against the policies the template attaches to that
 * function's role. A grant missing from infra/ fails here, naming the
 * function, the action and the resource.
 *
 * To cover a new code path that calls AWS, add a step below that drives the
 * handler through it; to cover a new kind of AWS call, teach
 * support/aws-calls.ts how IAM authorizes it (until then it is reported).
 */

const REGION = "us-east-1";
const ACCOUNT = "000000000000";
/** The API caller: a role session, so the tenant is the role. */
const CALLER = "arn:aws:sts::123456789012:assumed-role/Reporter/session-1";
const TENANT = "arn:aws:iam::123456789012:role/Reporter";

let synth: Synthesized;
let disposeSynth = () => {};
let clients: TestClients;
let recorder: AwsCallRecorder;
let bindings: Bindings;
/** ARN → the construct path it stands for, so failures read "Storage/RunsTable". */
const labels = new Map<string, string>();
const created: { tables: string[]; queues: string[] } = { tables: [], queues: [] };
const savedEnv = { ...process.env };
/** The dispatcher invocations the tick asked Lambda for, answered here instead. */
const invocations: { functionName: string; payload: Record<string, unknown> }[] = [];

const handlers: {
  api?: typeof import("../../functions/api/handler.js").handler;
  tick?: typeof import("../../functions/tick/handler.js").handler;
  dispatcher?: typeof import("../../functions/dispatcher/handler.js").handler;
  worker?: typeof import("../../functions/worker/handler.js").handler;
  dlq?: typeof import("../../functions/dlq/handler.js").handler;
} = {};

/** Logical id → construct path ("Storage/RunsTable"), for messages a person reads. */
function constructPaths(): Map<string, string> {
  const paths = new Map<string, string>();
  for (const construct of synth.stack.node.findAll()) {
    if (!CfnElement.isCfnElement(construct)) continue;
    const path = construct.node.path.split("/").slice(1);
    if (path.at(-1) === "Resource") path.pop();
    paths.set(synth.stack.getLogicalId(construct), path.join("/"));
  }
  return paths;
}

function functionResource(component: Component) {
  const fn = functionsOf(synth).find(([c]) => c === component)?.[1];
  if (!fn) throw new Error(`no function ${component}`);
  const id = logicalIdOf(synth.stack, fn.fn);
  const properties = synth.resources[id]?.Properties ?? {};
  return { id, properties };
}

/** The function's name and limits, as its Lambda context reports them. */
function identity(component: Component): LambdaIdentity {
  const { id, properties } = functionResource(component);
  return {
    functionName: resolveValue({ Ref: id }, bindings),
    region: REGION,
    account: ACCOUNT,
    timeoutSeconds: Number(properties.Timeout ?? 3),
    memoryMb: Number(properties.MemorySize ?? 128),
  };
}

/** The environment the stack gives the function, plus what the Lambda runtime adds. */
function runtimeEnvironment(component: Component): Record<string, string> {
  const { properties } = functionResource(component);
  const environment = isObject(properties.Environment) ? properties.Environment : {};
  const variables = isObject(environment.Variables) ? environment.Variables : {};
  return {
    ...Object.fromEntries(
      Object.entries(variables).map(([name, value]) => [name, resolveValue(value, bindings)]),
    ),
    AWS_REGION: REGION,
    AWS_DEFAULT_REGION: REGION,
    AWS_LAMBDA_FUNCTION_NAME: identity(component).functionName,
    // The emulators stand in for the two services; calls to any other are answered by the recorder.
    AWS_ENDPOINT_URL_DYNAMODB: inject("dynamoEndpoint"),
    AWS_ENDPOINT_URL_SQS: inject("sqsEndpoint"),
    POWERTOOLS_LOG_LEVEL: "SILENT",
    POWERTOOLS_METRICS_DISABLED: "true",
  };
}

/** Runs `body` as the function: its environment set, its AWS calls recorded as its own. */
async function as<T>(component: Component, body: () => Promise<T>): Promise<T> {
  process.env = { ...savedEnv, ...runtimeEnvironment(component) };
  return recorder.as(component, body);
}

function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`${what} is not loaded`);
  return value;
}

/** Creates an emulator twin of every table and queue in the template, bound to its logical id. */
async function provision(): Promise<Bindings> {
  const ns = testNamespace("iam");
  const paths = constructPaths();
  const pathOf = (id: string) => paths.get(id) ?? id;
  const resources = new Map<string, { ref: string; attributes: Record<string, string> }>();
  for (const [id, resource] of Object.entries(synth.resources)) {
    const p = resource.Properties ?? {};
    if (resource.Type === "AWS::DynamoDB::Table") {
      const name = await createTable(clients.dynamo, {
        TableName: ns.name(id),
        BillingMode: "PAY_PER_REQUEST",
        KeySchema: p.KeySchema,
        AttributeDefinitions: p.AttributeDefinitions,
        ...(p.GlobalSecondaryIndexes ? { GlobalSecondaryIndexes: p.GlobalSecondaryIndexes } : {}),
      } as unknown as CreateTableCommandInput);
      created.tables.push(name);
      const { Table } = await clients.dynamo.send(new DescribeTableCommand({ TableName: name }));
      const arn = Table?.TableArn ?? "";
      resources.set(id, { ref: name, attributes: { Arn: arn } });
      labels.set(arn, pathOf(id));
    } else if (resource.Type === "AWS::SQS::Queue") {
      const name = ns.name(id).slice(0, 80);
      const queue = await createQueue(clients.sqs, name, {
        VisibilityTimeout: String(p.VisibilityTimeout ?? 30),
      });
      created.queues.push(queue.url);
      resources.set(id, { ref: queue.url, attributes: { Arn: queue.arn, QueueName: name } });
      labels.set(queue.arn, pathOf(id));
    } else if (resource.Type === "AWS::Lambda::Function") {
      const name = ns.name(id);
      const arn = `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${name}`;
      resources.set(id, { ref: name, attributes: { Arn: arn } });
      labels.set(arn, pathOf(id));
    }
  }
  return { partition: "aws", region: REGION, account: ACCOUNT, resources };
}

function boundArn(type: string, ref: string): string | undefined {
  for (const [id, bound] of bindings.resources) {
    if (synth.resources[id]?.Type === type && bound.ref === ref) {
      return bound.attributes.Arn ?? bound.ref;
    }
  }
  return undefined;
}

/** Seeds data through the engine's own code, on the test's clients (not recorded), at a given time. */
function seedingEngine(clockOffsetMs: number): Engine {
  const env = runtimeEnvironment("worker");
  return {
    doc: clients.doc,
    sqs: clients.sqs,
    tables: {
      jobs: env.JOBS_TABLE ?? "",
      runs: env.RUNS_TABLE ?? "",
      webhookSecrets: env.WEBHOOK_SECRETS_TABLE ?? "",
    },
    queues: {
      high: env.QUEUE_URL_HIGH ?? "",
      normal: env.QUEUE_URL_NORMAL ?? "",
      low: env.QUEUE_URL_LOW ?? "",
    },
    settings: loadSettings(env),
    clock: () => new Date(Date.now() + clockOffsetMs),
    random: Math.random,
    obs: { log: silentObservability.log, metrics: new MetricsRecorder() },
  };
}

function queueUrl(priority: "high" | "normal" | "low"): string {
  const url = runtimeEnvironment("worker")[`QUEUE_URL_${priority.toUpperCase()}`];
  if (url === undefined) throw new Error(`no ${priority} queue`);
  return url;
}

/** What Lambda's SQS poller would hand the function: every message visible now, as received. */
async function receiveVisible(url: string): Promise<ReceivedMessage[]> {
  const received: ReceivedMessage[] = [];
  for (let empty = 0; empty < 2; ) {
    const { Messages = [] } = await clients.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: url,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 0,
        VisibilityTimeout: 120,
        MessageSystemAttributeNames: [
          "ApproximateReceiveCount",
          "SentTimestamp",
          "SenderId",
          "ApproximateFirstReceiveTimestamp",
        ],
      }),
    );
    if (Messages.length === 0) empty++;
    received.push(...Messages);
  }
  return received;
}

async function runsOf(jobId: string): Promise<Run[]> {
  const { Items = [] } = await clients.doc.send(
    new ScanCommand({
      TableName: runtimeEnvironment("worker").RUNS_TABLE,
      ConsistentRead: true,
      FilterExpression: "jobId = :jobId",
      ExpressionAttributeValues: { ":jobId": jobId },
    }),
  );
  return Items.map(decodeRun).sort((a, b) => a.attempt - b.attempt);
}

/** A job item's TTL (epoch seconds), which the engine's Job leaves out. */
async function jobExpiresAt(jobId: string): Promise<number> {
  const { Item } = await clients.doc.send(
    new GetCommand({
      TableName: runtimeEnvironment("worker").JOBS_TABLE,
      Key: jobKey(jobId),
      ConsistentRead: true,
    }),
  );
  return Number(Item?.expiresAt);
}

async function dueEntriesOf(jobId: string): Promise<DueEntry[]> {
  const { Items = [] } = await clients.doc.send(
    new ScanCommand({
      TableName: runtimeEnvironment("worker").JOBS_TABLE,
      ConsistentRead: true,
      FilterExpression: "begins_with(pk, :due) AND jobId = :jobId",
      ExpressionAttributeValues: { ":due": "DUE#", ":jobId": jobId },
    }),
  );
  return Items.map(decodeDueEntry);
}

async function api(
  method: string,
  path: string,
  options: {
    body?: unknown;
    query?: string;
    headers?: Record<string, string>;
    /** Another caller than CALLER: another tenant. */
    userArn?: string;
  } = {},
) {
  const handler = required(handlers.api, "the API handler");
  const response = await as("api", () =>
    handler(
      httpApiEvent(method, path, { userArn: CALLER, ...options }),
      lambdaContext(identity("api")),
    ),
  );
  return { status: response.statusCode, body: JSON.parse(response.body || "null") as unknown };
}

function field(value: unknown, name: string): unknown {
  return typeof value === "object" && value !== null
    ? (value as Record<string, unknown>)[name]
    : undefined;
}

beforeAll(async () => {
  // The fail type drives the worker's retry and dead-letter paths: a demo type, enabled here.
  // A concurrent-runs cap, so the worker takes, extends and frees slots (without one it reads none).
  ({ synth, dispose: disposeSynth } = synthesizeUnbundled({
    demoJobTypes: "true",
    quotaConcurrentRuns: "100",
  }));
  clients = createTestClients();
  bindings = await provision();
  recorder = recordAwsCalls({
    emulated: ["dynamodb", "sqs"],
    arns: {
      table: (name) =>
        boundArn("AWS::DynamoDB::Table", name) ?? `<table ${name}, not in the stack>`,
      queue: (url) => boundArn("AWS::SQS::Queue", url) ?? `<queue ${url}, not in the stack>`,
      lambdaFunction: (name) =>
        name.startsWith("arn:")
          ? name
          : (boundArn("AWS::Lambda::Function", name) ?? `<function ${name}, not in the stack>`),
    },
    interceptors: {
      "lambda:Invoke": (input) => {
        const payload = input.Payload instanceof Uint8Array ? input.Payload : new Uint8Array();
        const parsed: unknown = JSON.parse(new TextDecoder().decode(payload));
        if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
          throw new Error(`the tick invoked the dispatcher with ${JSON.stringify(parsed)}`);
        }
        invocations.push({ functionName: String(input.FunctionName), payload: { ...parsed } });
        return { StatusCode: input.InvocationType === "Event" ? 202 : 200 };
      },
    },
  });
  // Each handler module builds its engine when first imported.
  handlers.api = (await as("api", () => import("../../functions/api/handler.js"))).handler;
  handlers.tick = (await as("tick", () => import("../../functions/tick/handler.js"))).handler;
  handlers.dispatcher = (
    await as("dispatcher", () => import("../../functions/dispatcher/handler.js"))
  ).handler;
  handlers.worker = (await as("worker", () => import("../../functions/worker/handler.js"))).handler;
  handlers.dlq = (await as("dlq", () => import("../../functions/dlq/handler.js"))).handler;
});

afterAll(async () => {
  recorder?.restore();
  process.env = savedEnv;
  if (clients) {
    await Promise.all([
      ...created.tables.map((table) => deleteTable(clients.dynamo, table)),
      ...created.queues.map((url) => deleteQueue(clients.sqs, url)),
    ]);
    clients.destroy();
  }
  disposeSynth();
});

describe("each handler, driven through its AWS-calling paths", () => {
  const ids: Record<string, string> = {};

  it("api: create (with a key, fast path), list, read, edit, preview, pause, resume, trigger, runs, cancel, delete", async () => {
    const created = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { cron: "0 9 * * *", timezone: "Europe/Berlin" } },
      headers: { "idempotency-key": "conformance-1" },
    });
    expect(created.status).toBe(201);
    const id = String(field(created.body, "id"));
    const repeat = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { cron: "0 9 * * *", timezone: "Europe/Berlin" } },
      headers: { "idempotency-key": "conformance-1" },
    });
    expect([repeat.status, field(repeat.body, "id")]).toEqual([200, id]);

    const listed = await api("GET", "/jobs", { query: "limit=10" });
    expect(listed.status).toBe(200);
    const items = field(listed.body, "items");
    expect(Array.isArray(items) && items.map((job) => field(job, "id"))).toContain(id);
    expect((await api("GET", "/jobs", { query: "status=active" })).status).toBe(200);

    const read = await api("GET", `/jobs/${id}`);
    expect(read.status).toBe(200);
    const edited = await api("PATCH", `/jobs/${id}`, {
      body: { name: "renamed", payload: { n: 1 } },
      headers: { "if-match": `"${String(field(read.body, "version"))}"` },
    });
    expect(edited.status).toBe(200);
    const rescheduled = await api("PATCH", `/jobs/${id}`, {
      body: { schedule: { every: "PT1M" } },
      headers: { "if-match": `"${String(field(edited.body, "version"))}"` },
    });
    expect(rescheduled.status).toBe(200);
    expect((await api("GET", `/jobs/${id}/preview`, { query: "count=3" })).status).toBe(200);
    expect((await api("POST", `/jobs/${id}/pause`)).status).toBe(200);
    expect((await api("POST", `/jobs/${id}/resume`)).status).toBe(200);
    const triggered = await api("POST", `/jobs/${id}/trigger`);
    expect(triggered.status).toBe(202);
    const runs = await api("GET", `/jobs/${id}/runs`);
    expect(runs.status).toBe(200);
    const runId = String(field(triggered.body, "runId"));
    expect((await api("GET", `/jobs/${id}/runs/${runId}`)).status).toBe(200);
    expect((await api("POST", `/jobs/${id}/cancel`)).status).toBe(200);
    expect(new Set((await runsOf(id)).map((run) => run.status))).toEqual(new Set(["CANCELLED"]));
    // Delete removes the job; its run history is still read, the tenant taken from the runs.
    expect((await api("DELETE", `/jobs/${id}`)).status).toBe(204);
    expect((await api("GET", `/jobs/${id}`)).status).toBe(404);
    expect((await api("GET", `/jobs/${id}/runs`)).status).toBe(200);

    // Due at once: claimed by the writer (the fast path), one-off and recurring.
    const oneOff = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { runAt: new Date().toISOString() } },
    });
    expect(oneOff.status).toBe(201);
    ids.succeeds = String(field(oneOff.body, "id"));
    const recurring = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { every: "PT1H" }, overlapPolicy: "buffer_one" },
    });
    expect(recurring.status).toBe(201);
    ids.recurring = String(field(recurring.body, "id"));
    // A dependent of the one-off (its create adds it to the one-off's dependents); an edit that
    // keeps that upstream and adds another holds the kept one unchanged (a ConditionCheck).
    const dependent = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { after: { jobs: [ids.succeeds] } } },
    });
    expect(dependent.status).toBe(201);
    const dependentId = String(field(dependent.body, "id"));
    const moreUpstreams = await api("PATCH", `/jobs/${dependentId}`, {
      body: { schedule: { after: { jobs: [ids.succeeds, ids.recurring], on: "completion" } } },
      headers: { "if-match": `"${String(field(dependent.body, "version"))}"` },
    });
    expect(moreUpstreams.status).toBe(200);
    // A webhook: the worker signs it with the tenant's secret, made on that first use; the stack's
    // worker refuses the loopback target (ALLOW_PRIVATE_TARGETS=false) after signing.
    const webhook = await api("POST", "/jobs", {
      body: {
        type: "http",
        schedule: { runAt: new Date().toISOString() },
        target: { url: "http://localhost/hook" },
        payload: { n: 1 },
      },
    });
    expect(webhook.status).toBe(201);
    ids.webhook = String(field(webhook.body, "id"));
    // An async one: the worker writes the hash of the run token it makes for the delivery to the
    // run (the start with it) before it sends the delivery, which is then refused the same way.
    const asyncWebhook = await api("POST", "/jobs", {
      body: {
        type: "http",
        schedule: { runAt: new Date().toISOString() },
        target: { url: "http://localhost/hook", mode: "async" },
        timeoutSeconds: 3600,
      },
    });
    expect(asyncWebhook.status).toBe(201);
    ids.asyncWebhook = String(field(asyncWebhook.body, "id"));
    // A batch create: the idempotency records in one BatchGetItem, the fast-path runs and the plain
    // jobs' due entries, then the plain jobs, with BatchWriteItem; a keyed job in its transaction.
    const batch = await api("POST", "/jobs:batch", {
      body: {
        jobs: [
          { type: "noop", schedule: { runAt: new Date().toISOString() } },
          { type: "noop", schedule: { every: "PT1H" } },
          { type: "noop", schedule: { every: "PT1H" }, idempotencyKey: "iam-batch" },
        ],
      },
    });
    expect(batch.status).toBe(200);
    expect((batch.body as { results: { status: number }[] }).results.map((r) => r.status)).toEqual([
      201, 201, 201,
    ]);
    for (const [name, retry] of [
      ["retriesSoon", { maxAttempts: 3, initialDelaySeconds: 1, maxDelaySeconds: 1 }],
      ["retriesLater", { maxAttempts: 3, initialDelaySeconds: 3600 }],
      ["dies", { maxAttempts: 1 }],
    ] as const) {
      const failing = await api("POST", "/jobs", {
        body: { type: "fail", schedule: { runAt: new Date().toISOString() }, retry },
      });
      expect(failing.status).toBe(201);
      ids[name] = String(field(failing.body, "id"));
    }
  });

  it("api: an edit's fast-path claim whose job moved off its entry after the claim put its runs deletes them (DeleteItem)", async () => {
    // The claim puts its runs, then its transaction finds the job no longer pointing at the entry
    // (moved here by a write between the two, as a concurrent writer would): the claim deletes
    // the runs it put, in the API's function as in the dispatcher's.
    const startAt = new Date(Date.now() + 3_600_000).toISOString();
    const created = await api("POST", "/jobs", {
      body: { type: "noop", schedule: { every: "PT1H", startAt } },
    });
    expect(created.status).toBe(201);
    const id = String(field(created.body, "id"));
    const key = jobKey(id);
    let moved = false;
    recorder.before(
      "dynamodb:TransactWriteItems",
      (input) =>
        (Array.isArray(input.TransactItems) ? (input.TransactItems as unknown[]) : []).some(
          (item) =>
            field(field(field(item, "Update"), "Key"), "pk") === key.pk &&
            String(field(field(item, "Update"), "UpdateExpression")).startsWith("SET nextRunAt"),
        ),
      async () => {
        await clients.doc.send(
          new UpdateCommand({
            TableName: seedingEngine(0).tables.jobs,
            Key: key,
            UpdateExpression: "SET nextDueKey.sk = :elsewhere",
            ExpressionAttributeValues: { ":elsewhere": "moved-by-a-concurrent-write" },
          }),
        );
        moved = true;
      },
    );
    const edited = await api("PATCH", `/jobs/${id}`, {
      body: { schedule: { every: "PT1M" } },
      headers: { "if-match": `"${String(field(created.body, "version"))}"` },
    });
    expect(edited.status).toBe(200);
    expect(moved).toBe(true);
    expect((await runsOf(id)).filter((run) => run.status === "QUEUED")).toEqual([]);
  });

  it("api: an edit back to a one-off's time whose run there is still queued checks that run in its transaction (ConditionCheckItem on runs)", async () => {
    // Due within the fast path's window: the create claims it and puts its run, QUEUED. Moved
    // away and back, the edit files the occurrence at attempt 1 beside that run, on condition it
    // is still under way (job-update.ts, runStillUnderWay).
    const runAt = new Date(Date.now() + 30_000).toISOString();
    const created = await api("POST", "/jobs", { body: { type: "noop", schedule: { runAt } } });
    expect(created.status).toBe(201);
    const id = String(field(created.body, "id"));
    expect((await runsOf(id)).map((run) => run.status)).toEqual(["QUEUED"]);
    const away = await api("PATCH", `/jobs/${id}`, {
      body: { schedule: { runAt: new Date(Date.now() + 7_200_000).toISOString() } },
      headers: { "if-match": `"${String(field(created.body, "version"))}"` },
    });
    expect(away.status).toBe(200);
    const back = await api("PATCH", `/jobs/${id}`, {
      body: { schedule: { runAt } },
      headers: { "if-match": `"${String(field(away.body, "version"))}"` },
    });
    expect(back.status).toBe(200);
  });

  it("tick: fans out one dispatcher invocation per shard, then the reaper re-sends overdue runs, keeping the completed job of one that has waited past half the retention", async () => {
    // Claimed ten minutes ago and never started: its reaper deadline has long passed.
    const { job } = await createJob(seedingEngine(-600_000), {
      ...testJob(),
      schedule: { runAt: new Date(Date.now() - 595_000).toISOString() },
    });
    ids.overdue = job.jobId;
    // Its one run claimed a day more than half a completed job's retention ago (which completed
    // the job: maxRuns) and never started: the reaper's re-send reads the job and keeps it for the
    // run (keepCompletedJobForWaitingRun).
    const { retentionDays, deadLetterRetentionDays } = loadSettings(runtimeEnvironment("tick"));
    const waitedDays = Math.max(retentionDays, deadLetterRetentionDays) / 2 + 1;
    const longAgo = seedingEngine(-waitedDays * 86_400_000);
    const { job: waiting } = await createJob(longAgo, {
      ...testJob(),
      priority: "low",
      schedule: {
        every: "PT1M",
        startAt: new Date(
          Math.ceil(longAgo.clock().getTime() / 1000) * 1000 + 60_000,
        ).toISOString(),
      },
      maxRuns: 1,
    });
    expect((await getJob(seedingEngine(0), waiting.jobId))?.status).toBe("COMPLETED");
    const expiresBefore = await jobExpiresAt(waiting.jobId);
    const tick = required(handlers.tick, "the tick handler");
    const rule = `arn:aws:events:${REGION}:${ACCOUNT}:rule/every-minute`;
    const result = await as("tick", async () => {
      const handler = tick as (event: unknown, context: Context) => ReturnType<typeof tick>;
      return handler(scheduledEvent(rule, new Date()), lambdaContext(identity("tick")));
    });
    const shards = loadSettings(runtimeEnvironment("tick")).maxShardCount;
    expect(result.shards).toBe(shards);
    // One per shard, in the order of the minute's rotation (each minute's fan-out starts 50
    // shards further on): compared in shard order.
    const byShard = (payload: Record<string, unknown>) => Number(payload.shard);
    expect(invocations.map((i) => i.payload).sort((a, b) => byShard(a) - byShard(b))).toEqual(
      Array.from({ length: shards }, (_, shard) => ({ shard, shardCount: shards })),
    );
    expect(new Set(invocations.map((i) => i.functionName))).toEqual(
      new Set([identity("dispatcher").functionName]),
    );
    expect(result.resent).toBeGreaterThanOrEqual(2);
    expect(await jobExpiresAt(waiting.jobId)).toBeGreaterThan(expiresBefore);
  });

  it("dispatcher: passes over the shards the tick asked for claim due entries, skipping misfires", async () => {
    // Created a quarter of an hour ago, so the fast path left them to the dispatcher: one due in
    // a minute, and one due every second of the minute two minutes ago (skip on misfire), whose
    // 60 SKIPPED records the claim puts before its transaction.
    const engine = seedingEngine(-900_000);
    const { job: due } = await createJob(engine, {
      ...testJob(),
      schedule: { every: "PT1H", startAt: new Date(Date.now() + 60_000).toISOString() },
    });
    // The pass sweeps from two minutes back, by minute: keep clear of a minute boundary.
    const toBoundary = 60_000 - ((Date.now() - 120_000) % 60_000);
    if (toBoundary < 5_000) await sleep(toBoundary + 100);
    const missed = new Date(Math.floor((Date.now() - 120_000) / 60_000) * 60_000);
    const { job: misfired } = await createJob(engine, {
      ...testJob({ priority: "low" }),
      schedule: {
        cron: `* ${missed.getUTCMinutes()} ${missed.getUTCHours()} * * *`,
        timezone: "UTC",
      },
      policies: { ...testJob().policies, misfire: "skip" },
    });
    // An upstream run's ending whose worker did not fan it out: the pass fans it out.
    const { job: upstream } = await createJob(engine, {
      ...testJob(),
      schedule: { cron: "0 0 1 1 *", timezone: "UTC" },
    });
    const { job: dependent } = await createJob(engine, {
      ...testJob(),
      schedule: { after: { jobs: [upstream.jobId], on: "success" } },
    });
    const ended = queuedRun(
      {
        jobId: upstream.jobId,
        tenantId: upstream.tenantId,
        scheduledFor: new Date(Date.now() - 60_000),
        dueAt: new Date(Date.now() - 60_000),
        attempt: 1,
        priority: upstream.priority,
        jobVersion: upstream.version,
      },
      new Date(),
      engine.settings,
    ).run;
    const withDependent = { ...upstream, dependents: [dependent.jobId] };
    const trigger = triggerEntryOf(engine, withDependent, ended, "SUCCEEDED", new Date());
    await clients.doc.send(
      new PutCommand({ TableName: engine.tables.jobs, Item: encodeDueEntry(trigger) }),
    );
    // An entry its job does not point at (the job's own is filed elsewhere): the claim puts its
    // run, its transaction fails on the job, and it deletes the run it put.
    const orphanAt = new Date(Date.now() + 30_000);
    const orphan: DueEntry = {
      key: dueEntryKey(due.jobId, orphanAt, 1, new Date(), engine.settings.shardCount),
      kind: "occurrence",
      jobId: due.jobId,
      tenantId: due.tenantId,
      dueAt: orphanAt.toISOString(),
      scheduledFor: orphanAt.toISOString(),
      attempt: 1,
      jobVersion: due.version,
      priority: due.priority,
      schedule: { every: "PT1H", startAt: orphanAt.toISOString() },
      misfire: due.policies.misfire,
    };
    await clients.doc.send(
      new PutCommand({ TableName: engine.tables.jobs, Item: encodeDueEntry(orphan) }),
    );
    // A cancel that lands between a claim's run put and its transaction: the claim loses its
    // entry, and ends the run it put CANCELLED, which the cancel's sweep came too early to see.
    const { job: cancelledMidClaim } = await createJob(engine, {
      ...testJob(),
      schedule: { every: "PT1H", startAt: new Date(Date.now() + 45_000).toISOString() },
    });
    recorder.before(
      "dynamodb:PutItem",
      (input) =>
        input.TableName === engine.tables.runs &&
        field(input.Item, "jobId") === cancelledMidClaim.jobId,
      async () => {
        await cancelJob(engine, cancelledMidClaim.tenantId, cancelledMidClaim.jobId);
      },
    );
    const dispatcher = required(handlers.dispatcher, "the dispatcher handler");
    const shards = new Set(
      [due, misfired, upstream, cancelledMidClaim].map((job) =>
        shardOf(job.jobId, engine.settings.shardCount),
      ),
    );
    for (const shard of shards) {
      const invocation = invocations.find((i) => field(i.payload, "shard") === shard);
      if (!invocation) throw new Error(`the tick did not invoke the dispatcher for shard ${shard}`);
      const result = await as("dispatcher", () =>
        dispatcher(invocation.payload, lambdaContext(identity("dispatcher"))),
      );
      expect(result).toMatchObject({ shard, outcome: "swept" });
    }
    expect((await runsOf(due.jobId)).map((run) => run.status)).toEqual(["QUEUED"]);
    expect((await runsOf(due.jobId)).map((run) => run.scheduledFor)).not.toContain(
      orphan.scheduledFor,
    );
    expect((await runsOf(cancelledMidClaim.jobId)).map((run) => [run.status, run.reason])).toEqual([
      ["CANCELLED", "job cancelled"],
    ]);
    const skipped = (await runsOf(misfired.jobId)).filter((run) => run.status === "SKIPPED");
    expect(skipped).toHaveLength(60);
    expect((await runsOf(dependent.jobId)).map((run) => run.trigger?.runId)).toEqual([ended.runId]);
  });

  it("worker: runs, finishes, retries (soon and later), dead-letters, admits a recurring run", async () => {
    const worker = required(handlers.worker, "the worker handler");
    // A run whose job was never written (a fast-path create that died before its job's write).
    const orphaned = seedingEngine(0);
    const { job: gone } = await createJob(orphaned, {
      ...testJob(),
      schedule: { runAt: new Date().toISOString() },
    });
    await clients.doc.send(
      new DeleteCommand({ TableName: orphaned.tables.jobs, Key: jobKey(gone.jobId) }),
    );
    ids.gone = gone.jobId;
    const url = queueUrl("normal");
    const arn = boundArn("AWS::SQS::Queue", url) ?? "";
    /** One event per ten messages, as the event source batches them; acknowledged ones are deleted. */
    const deliver = async () => {
      const messages = await receiveVisible(url);
      for (let i = 0; i < messages.length; i += 10) {
        const batch = sqsEvent(arn, messages.slice(i, i + 10));
        const response = await as("worker", () => worker(batch, lambdaContext(identity("worker"))));
        expect(response.batchItemFailures).toEqual([]);
        await clients.sqs.send(
          new DeleteMessageBatchCommand({
            QueueUrl: url,
            Entries: batch.Records.map((r, n) => ({
              Id: String(n),
              ReceiptHandle: r.receiptHandle,
            })),
          }),
        );
      }
      return messages.length;
    };
    // Backoff is jittered over [0, ceiling]: drawing near the top makes the hour-long retry a due
    // entry (not a run queued at once), so that path is taken every time.
    const random = vi.spyOn(Math, "random").mockReturnValue(0.99);
    try {
      expect(await deliver()).toBeGreaterThanOrEqual(5);
    } finally {
      random.mockRestore();
    }
    const statuses = async (name: string) =>
      (await runsOf(ids[name] ?? "")).map((run) => run.status);
    expect(await statuses("succeeds")).toEqual(["SUCCEEDED"]);
    expect(await statuses("recurring")).toEqual(["SUCCEEDED"]);
    expect(await statuses("dies")).toEqual(["DEAD"]);
    expect(await statuses("gone")).toEqual(["CANCELLED"]);
    expect(await statuses("webhook")).toEqual(["DEAD"]);
    expect((await runsOf(ids.webhook ?? ""))[0]?.error).toMatch(
      /localhost resolves to .*; refused/,
    );
    const [asyncRun] = await runsOf(ids.asyncWebhook ?? "");
    expect(asyncRun).toMatchObject({ status: "DEAD", fence: 1 });
    expect(asyncRun?.error).toMatch(/localhost resolves to .*; refused/);
    expect(asyncRun?.runTokenHash).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const { Items: secrets = [] } = await clients.doc.send(
      new ScanCommand({ TableName: runtimeEnvironment("worker").WEBHOOK_SECRETS_TABLE }),
    );
    expect(secrets.map((item) => item.pk)).toEqual([`WEBHOOKSECRET#${TENANT}`]);
    expect(await statuses("retriesLater")).toEqual(["FAILED"]);
    expect(
      (await dueEntriesOf(ids.retriesLater ?? "")).map((entry) => [entry.kind, entry.attempt]),
    ).toEqual([["retry", 2]]);
    expect((await statuses("retriesSoon"))[0]).toBe("FAILED");
    // The soon retry was sent with its (up to one second) delay: deliver it as it arrives.
    await waitFor("the second attempt of the soon retry", async () => {
      await deliver();
      return (await statuses("retriesSoon")).length === 3;
    });
    expect(await statuses("retriesSoon")).toEqual(["FAILED", "FAILED", "QUEUED"]);
    // A second run of the recurring job: its admission reads the runs its job lists (the first,
    // ended), and the API reads the job with the run it lists now.
    expect((await api("POST", `/jobs/${ids.recurring}/trigger`)).status).toBe(202);
    await waitFor("the recurring job's second run", async () => {
      await deliver();
      return (await statuses("recurring")).length === 2;
    });
    expect(await statuses("recurring")).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    const shown = await api("GET", `/jobs/${ids.recurring}`);
    expect(field(shown.body, "lastRun")).toMatchObject({ status: "succeeded" });
  });

  it("worker: after an outage, fire_once skips the late runs of a job its end completed while its next occurrence has a run, and runs the last one", async () => {
    // Created twelve minutes ago, every minute from the next, three runs (maxRuns): the create's
    // claim queued all three and completed the job; no worker took them until now.
    const seed = seedingEngine(-720_000);
    const startAt = Math.ceil((seed.clock().getTime() + 60_000) / 1000) * 1000;
    const { job } = await createJob(seed, {
      ...testJob(),
      tenantId: TENANT,
      // Its own queue: the messages below are the only ones the worker is handed from it.
      priority: "high",
      schedule: { every: "PT1M", startAt: new Date(startAt).toISOString() },
      maxRuns: 3,
    });
    expect((await getJob(seedingEngine(0), job.jobId))?.status).toBe("COMPLETED");
    const queued = await runsOf(job.jobId);
    expect(queued.map((run) => run.status)).toEqual(["QUEUED", "QUEUED", "QUEUED"]);
    // The create sent them with their delays (as of twelve minutes ago); send them again now.
    const url = queueUrl("high");
    for (const run of queued) {
      await clients.sqs.send(
        new SendMessageCommand({ QueueUrl: url, MessageBody: encodeRunMessage(runMessageOf(run)) }),
      );
    }
    const messages = (await receiveVisible(url)).filter((m) => m.Body?.includes(job.jobId));
    expect(messages).toHaveLength(3);
    const worker = required(handlers.worker, "the worker handler");
    const event = sqsEvent(boundArn("AWS::SQS::Queue", url) ?? "", messages);
    const response = await as("worker", () => worker(event, lambdaContext(identity("worker"))));
    expect(response.batchItemFailures).toEqual([]);
    const ended = (await runsOf(job.jobId)).sort((a, b) =>
      a.scheduledFor < b.scheduledFor ? -1 : 1,
    );
    expect(ended.map((run) => run.status)).toEqual(["SKIPPED", "SKIPPED", "SUCCEEDED"]);
  });

  it("dlq: marks DEAD a run whose message crashed its worker every time, and frees its job", async () => {
    // A recurring run that crashed every worker that started it, the last one minutes ago:
    // RUNNING, its lease lapsed, started as often as the redrive delivers a message.
    const crashed = seedingEngine(-900_000);
    const { job } = await createJob(crashed, { ...testJob(), schedule: { every: "PT1H" } });
    // A dependent on failure: the DEAD ending writes its trigger entry with itself.
    await createJob(crashed, {
      ...testJob(),
      schedule: { after: { jobs: [job.jobId], on: "failure" } },
    });
    const [message] = (await receiveVisible(queueUrl("normal"))).filter((m) =>
      m.Body?.includes(job.jobId),
    );
    const decoded = decodeRunMessage(message?.Body);
    if (!message?.Body || !decoded) throw new Error(`no message for job ${job.jobId}`);
    const { leaseMs, maxReceiveCount } = crashed.settings;
    let started: Awaited<ReturnType<typeof startRun>> = { kind: "missing" };
    for (let i = 0; i < maxReceiveCount; i++) {
      const at = new Date(crashed.clock().getTime() + i * (leaseMs + 1000));
      started = await startRun(crashed, decoded, `crashed-worker-${i}`, at);
    }
    if (started.kind !== "started") throw new Error(`could not start the run: ${started.kind}`);
    expect(started.run.fence).toBe(maxReceiveCount);
    const admitted = await admitRun(
      crashed,
      job,
      started.run.runId,
      new Date(started.run.leaseUntil ?? ""),
    );
    expect(admitted.decision.action).toBe("start");
    // What redrive does after maxReceiveCount deliveries: the message moves to the DLQ as it is.
    const workQueue = Object.entries(synth.resources).find(
      ([id, r]) =>
        r.Type === "AWS::SQS::Queue" && bindings.resources.get(id)?.ref === queueUrl("normal"),
    );
    const redrive = workQueue?.[1].Properties?.RedrivePolicy;
    const dlqArn = resolveValue(
      isObject(redrive) ? redrive.deadLetterTargetArn : undefined,
      bindings,
    );
    const dlqUrl = [...bindings.resources.values()].find((b) => b.attributes.Arn === dlqArn)?.ref;
    if (!dlqUrl) throw new Error(`no DLQ ${dlqArn}`);
    await clients.sqs.send(new SendMessageCommand({ QueueUrl: dlqUrl, MessageBody: message.Body }));
    const redriven = await receiveVisible(dlqUrl);
    expect(redriven).toHaveLength(1);
    const dlq = required(handlers.dlq, "the DLQ handler");
    const response = await as("dlq", () => dlq(sqsEvent(dlqArn, redriven)));
    expect(response.batchItemFailures).toEqual([]);
    expect((await runsOf(job.jobId)).map((run) => run.status)).toEqual(["DEAD"]);
    expect((await getJob(seedingEngine(0), job.jobId))?.activeRuns).toEqual({});
    expect((await dueEntriesOf(job.jobId)).map((entry) => entry.kind)).toContain("trigger");
  });

  it("api: reads the caller's webhook secret (made by the worker), makes another tenant's, rotates", async () => {
    const read = await api("GET", "/webhook-secret");
    expect(read.status).toBe(200);
    const secret = String(field(read.body, "secret"));
    expect(secret).toMatch(/^whsec_/);
    const other = await api("GET", "/webhook-secret", {
      userArn: "arn:aws:sts::123456789012:assumed-role/Other/session-2",
    });
    expect(other.status).toBe(200);
    expect(field(other.body, "secret")).not.toBe(secret);
    const rotated = await api("POST", "/webhook-secret/rotate");
    expect(rotated.status).toBe(200);
    expect(field(rotated.body, "secret")).not.toBe(secret);
    // A rotation with an Idempotency-Key stores its hash in the same update; a repeat only reads.
    const headers = { "Idempotency-Key": "iam-rotate" };
    const keyed = await api("POST", "/webhook-secret/rotate", { headers });
    expect(keyed.status).toBe(200);
    const repeated = await api("POST", "/webhook-secret/rotate", { headers });
    expect(repeated.status).toBe(200);
    expect(field(repeated.body, "secret")).toBe(field(keyed.body, "secret"));
  });

  /** A one-off's run started as an async target's, with the run token its delivery carried. */
  async function startAsyncRun() {
    const seed = seedingEngine(0);
    const { job } = await createJob(seed, {
      ...testJob(),
      type: "fail",
      schedule: { runAt: new Date(Date.now() + 3_600_000).toISOString() },
    });
    const { run, item } = queuedRun(
      {
        jobId: job.jobId,
        tenantId: TENANT,
        scheduledFor: new Date(),
        dueAt: new Date(),
        attempt: 1,
        priority: "normal",
        jobVersion: job.version,
      },
      new Date(),
      seed.settings,
    );
    await clients.doc.send(new PutCommand({ TableName: seed.tables.runs, Item: item }));
    const started = await startRun(seed, run, "async-worker", new Date());
    if (started.kind !== "started") throw new Error("the async run did not start");
    const token = await issueRunToken(seed, started.run, job, new Date());
    return { seed, job, run, headers: { Authorization: `Bearer ${token}` } };
  }

  it("api: an async target heartbeats its run and completes it (failed: its next attempt put, then the run's and the job's writes) with its run token", async () => {
    const { run, headers } = await startAsyncRun();
    expect((await api("POST", `/runs/${run.runId}/heartbeat`, { headers })).status).toBe(200);
    const completed = await api("POST", `/runs/${run.runId}/complete`, {
      headers,
      body: { status: "failed", error: "the export failed" },
    });
    expect(completed.status).toBe(200);
    expect(field(completed.body, "status")).toBe("failed");
  });

  it("api: an async run's success fans its trigger out to its job's dependent (each dependent's run put with a check of its status: ConditionCheckItem)", async () => {
    const { seed, job, run, headers } = await startAsyncRun();
    const { job: dependent } = await createJob(seed, {
      ...testJob(),
      type: "noop",
      schedule: { after: { jobs: [job.jobId], on: "success" } },
    });
    const completed = await api("POST", `/runs/${run.runId}/complete`, {
      headers,
      body: { status: "succeeded" },
    });
    expect(completed.status).toBe(200);
    expect(field(completed.body, "status")).toBe("succeeded");
    expect((await runsOf(dependent.jobId)).map((r) => r.status)).toEqual(["QUEUED"]);
  });

  it("api: shows the caller its quotas (its override and running runs: a Query of its quota partition)", async () => {
    const quotas = await api("GET", "/quotas");
    expect(quotas.status).toBe(200);
    expect(field(quotas.body, "override")).toEqual({});
  });

  it("api: counts in the caller's quotas a lapsed slot's run (a BatchGetItem of the runs table)", async () => {
    const seed = seedingEngine(0);
    const now = new Date();
    const slot = {
      tenantId: TENANT,
      index: 0,
      runId: runId(newJobId(now), now, 1),
      fence: 1,
      leaseUntil: new Date(now.getTime() - 60_000).toISOString(),
      taker: "crashed-worker",
    };
    expect(await takeRunSlot(seed, slot, now)).toBe(true);
    const quotas = await api("GET", "/quotas");
    expect(quotas.status).toBe(200);
    // Its run is gone: the slot is free, not counted.
    expect(field(quotas.body, "runningRuns")).toBe(0);
  });

  it("api: lists the dead letters and replays one", async () => {
    const dead = await api("GET", "/dead-letters");
    expect(dead.status).toBe(200);
    const items = field(dead.body, "items");
    const runIds = Array.isArray(items) ? items.map((run) => String(field(run, "runId"))) : [];
    const dies = runIds.find((runId) => runId.startsWith(ids.dies ?? "-"));
    expect(dies).toBeDefined();
    expect((await api("POST", `/dead-letters/${dies}/replay`)).status).toBe(202);
  });
});

/** An ARN with the construct it stands for: "…:table/x-RunsTable (Storage/RunsTable, index inflight)". */
function describeResource(arn: string): string {
  const index = /\/index\/([^/]+)$/.exec(arn);
  const label = labels.get(index ? arn.slice(0, index.index) : arn);
  if (label === undefined) return arn;
  return `${arn} (${label}${index ? `, index ${index[1]}` : ""})`;
}

describe("IAM conformance", () => {
  function violations(component: Component): string[] {
    const grants = grantsOfRole(synth, roleOfComponent(synth, component), bindings);
    const found = new Set<string>();
    const mine = recorder.calls.filter((call: RecordedCall) => call.caller === component);
    for (const call of mine) {
      for (const { action, resource } of call.authorizations) {
        if (resource === null) {
          found.add(
            `${component}: ${call.operation} — test/infra/support/aws-calls.ts does not know how IAM authorizes it`,
          );
        } else if (!isAllowed(grants, action, resource)) {
          found.add(
            `${component}: ${action} on ${describeResource(resource)} is not allowed by its role (in ${call.operation})`,
          );
        }
      }
    }
    return [...found].sort();
  }

  it.each(COMPONENTS)("%s's role allows every AWS call its handler made", (component) => {
    expect(violations(component)).toEqual([]);
  });

  // Least privilege, where only the code uses the grant: every DynamoDB action granted on a table
  // or index is one some step above made. (Queue grants also serve Lambda's event sources and
  // async destinations, which no handler call shows.)
  it.each(COMPONENTS)("%s is granted no DynamoDB action its handler did not use", (component) => {
    const grants = grantsOfRole(synth, roleOfComponent(synth, component), bindings);
    const used = recorder.calls
      .filter((call) => call.caller === component)
      .flatMap((call) => call.authorizations);
    const unused = grants.flatMap((grant) =>
      grant.actions
        .filter((action) => action.startsWith("dynamodb:"))
        .flatMap((action) =>
          grant.resources
            .filter(
              (resource) =>
                !used.some(
                  (call) =>
                    call.resource !== null &&
                    allows(
                      { ...grant, actions: [action], resources: [resource] },
                      call.action,
                      call.resource,
                    ),
                ),
            )
            .map(
              (resource) =>
                `${component}: ${action} on ${describeResource(resource)} is granted, but no step used it: drop the grant, or drive the handler through the path that needs it`,
            ),
        ),
    );
    expect(unused).toEqual([]);
  });
});
