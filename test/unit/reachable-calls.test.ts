import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reachableCalls } from "../infra/support/reachable-calls.js";

/**
 * test/infra/iam-reachable.test.ts holds every AWS call left in a handler's bundle to its role's
 * grants, "however rarely reached": reachable-calls.ts finds them. Here, handlers that send AWS
 * calls in forms its reading may not know, each of which a role could lack in production.
 */
let dir = "";

/** What the reading finds in a handler of these lines: `<action> <table>` per call, or its refusal. */
async function callsOf(name: string, lines: readonly string[]): Promise<string[]> {
  const entry = join(dir, `${name}.ts`);
  await writeFile(entry, lines.join("\n"));
  return reachableCalls(entry).then(
    (calls) => calls.map((call) => `${call.action} ${call.table}`),
    (error: unknown) => [`refused: ${String(error)}`],
  );
}

/**
 * A handler's first lines: `doc`, a document client of the `client` class over DynamoDB (importing
 * `more` beside it), and `tables`, the names of the tables it is given, from its environment.
 */
const prelude = (client: string, more: readonly string[], tables: readonly string[]) => [
  'import { DynamoDBClient } from "@aws-sdk/client-dynamodb";',
  `import { ${[client, ...more].join(", ")} } from "@aws-sdk/lib-dynamodb";`,
  `const doc = ${client}.from(new DynamoDBClient({}));`,
  `const tables = { ${tables.map((t) => `${t}: process.env.${t.toUpperCase()} ?? ""`).join(", ")} };`,
];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "reachable-calls-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("the calls of a handler's bundle", () => {
  it("include a command of an SDK client the reading has no service for (S3), or refuse to read it", async () => {
    const read = await callsOf("s3", [
      'import { GetObjectCommand, S3Client } from "@aws-sdk/client-s3";',
      "const s3 = new S3Client({});",
      "export const handler = () =>",
      '  s3.send(new GetObjectCommand({ Bucket: "exports", Key: "k" }));',
    ]);
    expect(read).not.toEqual([]);
    // Refused, naming the package and where the bundle imports it, so its author teaches the
    // reading its service.
    expect(read).toEqual([
      expect.stringMatching(
        /^refused: Error: @aws-sdk\/client-s3 \(\S*s3\.ts\): a package this reading has no service for/,
      ),
    ]);
  });

  it("refuse the SDK imported other than by name, whose commands `new <Command>(…)` would not find", async () => {
    const read = await callsOf("namespace", [
      'import * as sqs from "@aws-sdk/client-sqs";',
      "const client = new sqs.SQSClient({});",
      "export const handler = () =>",
      '  client.send(new sqs.SendMessageCommand({ QueueUrl: "q", MessageBody: "b" }));',
    ]);
    expect(read).toEqual([
      expect.stringMatching(
        /^refused: Error: @aws-sdk\/client-sqs \(\S*namespace\.ts\): imported other than by name/,
      ),
    ]);
  });

  it("include a transaction's item whose input is built apart, as run-finish.ts builds its run's update", async () => {
    const calls = await callsOf("transaction", [
      ...prelude("DynamoDBDocumentClient", ["TransactWriteCommand"], ["runs", "jobs"]),
      "export const handler = (runId: string) => {",
      "  const runUpdate = {",
      "    TableName: tables.runs,",
      '    Key: { pk: runId, sk: "RUN" },',
      '    UpdateExpression: "SET #s = :s",',
      '    ExpressionAttributeNames: { "#s": "status" },',
      '    ExpressionAttributeValues: { ":s": "DEAD" },',
      "  };",
      "  return doc.send(",
      "    new TransactWriteCommand({",
      "      TransactItems: [",
      "        { Update: runUpdate },",
      '        { ConditionCheck: { TableName: tables.jobs, Key: { pk: "J", sk: "J" }, ConditionExpression: "attribute_exists(pk)" } },',
      "      ],",
      "    }),",
      "  );",
      "};",
    ]);
    expect(calls).toContain("dynamodb:UpdateItem runs");
  });

  it("take an input's table from the literal its identifier holds in the same function, or a literal it spreads, and from no other function's", async () => {
    const calls = await callsOf("identifiers", [
      ...prelude("DynamoDBDocumentClient", ["UpdateCommand"], ["runs", "jobs"]),
      "export function onRuns(runId: string) {",
      '  const update = { TableName: tables.runs, Key: { pk: runId }, UpdateExpression: "SET a = :a" };',
      '  return doc.send(new UpdateCommand({ ...update, ReturnValues: "ALL_NEW" }));',
      "}",
      "export function onGiven(update: { TableName: string; Key: Record<string, string> }) {",
      "  return doc.send(new UpdateCommand(update));",
      "}",
    ]);
    expect(calls).toEqual(["dynamodb:UpdateItem runs", "dynamodb:UpdateItem null"]);
  });

  it("include a call through the document client's methods (doc.get), which build their commands inside the SDK", async () => {
    const read = await callsOf("aggregated", [
      ...prelude("DynamoDBDocument", [], ["webhookSecrets"]),
      "export const handler = (tenant: string) =>",
      "  doc.get({ TableName: tables.webhookSecrets, Key: { pk: tenant } });",
    ]);
    expect(read).not.toEqual([]);
    expect(read).toEqual([
      expect.stringMatching(
        /^refused: Error: DynamoDBDocument from @aws-sdk\/lib-dynamodb \(\S*aggregated\.ts\): not a command, a client or an error class/,
      ),
    ]);
  });
});
