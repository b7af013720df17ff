import type { CreateTableCommandInput } from "@aws-sdk/client-dynamodb";

/**
 * The three tables, described once. The local sandbox and the integration tests
 * create them from here; the CDK stack declares the same keys, and a test
 * compares the synthesized template with these definitions.
 */
export interface TableNames {
  readonly jobs: string;
  readonly runs: string;
  /** Each tenant's webhook signing secrets; only the API and the worker may read it. */
  readonly webhookSecrets: string;
}

export const JOBS_BY_TENANT_INDEX = "byTenant";
export const RUNS_INFLIGHT_INDEX = "inflight";
export const RUNS_DEAD_LETTER_INDEX = "deadLetters";
export const RUNS_TTL_ATTRIBUTE = "expiresAt";
/** Completed and cancelled jobs, and idempotency records, expire by it (see retention.ts). */
export const JOBS_TTL_ATTRIBUTE = "expiresAt";

export function jobsTableDefinition(tableName: string): CreateTableCommandInput {
  return {
    TableName: tableName,
    BillingMode: "PAY_PER_REQUEST",
    AttributeDefinitions: [
      { AttributeName: "pk", AttributeType: "S" },
      { AttributeName: "sk", AttributeType: "S" },
      { AttributeName: "tenantPk", AttributeType: "S" },
      { AttributeName: "tenantSk", AttributeType: "S" },
    ],
    KeySchema: [
      { AttributeName: "pk", KeyType: "HASH" },
      { AttributeName: "sk", KeyType: "RANGE" },
    ],
    GlobalSecondaryIndexes: [
      {
        // Keys only: a job's item changes on every run (lastRun, nextRunAt), and a projected copy
        // would be rewritten each time. Listing reads the page's keys here, then the items.
        IndexName: JOBS_BY_TENANT_INDEX,
        KeySchema: [
          { AttributeName: "tenantPk", KeyType: "HASH" },
          { AttributeName: "tenantSk", KeyType: "RANGE" },
        ],
        Projection: { ProjectionType: "KEYS_ONLY" },
      },
    ],
  };
}

export function runsTableDefinition(tableName: string): CreateTableCommandInput {
  return {
    TableName: tableName,
    BillingMode: "PAY_PER_REQUEST",
    AttributeDefinitions: [
      { AttributeName: "pk", AttributeType: "S" },
      { AttributeName: "sk", AttributeType: "S" },
      { AttributeName: "inflightPk", AttributeType: "S" },
      { AttributeName: "inflightSk", AttributeType: "S" },
      { AttributeName: "deadPk", AttributeType: "S" },
      { AttributeName: "deadSk", AttributeType: "S" },
    ],
    KeySchema: [
      { AttributeName: "pk", KeyType: "HASH" },
      { AttributeName: "sk", KeyType: "RANGE" },
    ],
    GlobalSecondaryIndexes: [
      {
        // Sparse: a run carries inflightPk from when it is queued (SKIPPED records never do).
        // Keys only, and its sort key is moved neither by starts and heartbeats nor by the run's
        // end: the index is written once for most runs, and the reaper reads each entry once.
        IndexName: RUNS_INFLIGHT_INDEX,
        KeySchema: [
          { AttributeName: "inflightPk", KeyType: "HASH" },
          { AttributeName: "inflightSk", KeyType: "RANGE" },
        ],
        Projection: { ProjectionType: "KEYS_ONLY" },
      },
      {
        // Sparse: only DEAD runs not yet replayed carry deadPk.
        IndexName: RUNS_DEAD_LETTER_INDEX,
        KeySchema: [
          { AttributeName: "deadPk", KeyType: "HASH" },
          { AttributeName: "deadSk", KeyType: "RANGE" },
        ],
        Projection: { ProjectionType: "ALL" },
      },
    ],
  };
}

/** One item per tenant (`pk` = `WEBHOOKSECRET#<tenantId>`), apart so its access can be apart. */
export function webhookSecretsTableDefinition(tableName: string): CreateTableCommandInput {
  return {
    TableName: tableName,
    BillingMode: "PAY_PER_REQUEST",
    AttributeDefinitions: [{ AttributeName: "pk", AttributeType: "S" }],
    KeySchema: [{ AttributeName: "pk", KeyType: "HASH" }],
  };
}
