import type {
  AttributeDefinition,
  CreateTableCommandInput,
  KeySchemaElement,
} from "@aws-sdk/client-dynamodb";
import { RemovalPolicy } from "aws-cdk-lib";
import {
  type Attribute,
  AttributeType,
  BillingMode,
  ProjectionType,
  Table,
  TableEncryption,
} from "aws-cdk-lib/aws-dynamodb";
import { Key } from "aws-cdk-lib/aws-kms";
import { Construct } from "constructs";
import {
  JOBS_TTL_ATTRIBUTE,
  jobsTableDefinition,
  RUNS_TTL_ATTRIBUTE,
  runsTableDefinition,
  webhookSecretsTableDefinition,
} from "../../shared/storage/tables.js";
import { isDevStage, type SchedulerSettings } from "../settings.js";
import type { ProvisionedCapacity, TableCapacity } from "../table-capacity.js";

export interface StorageProps {
  readonly settings: SchedulerSettings;
}

/** A table and the names of its indexes, as declared in shared/storage/tables.ts. */
export interface DeclaredTable {
  readonly table: Table;
  readonly indexNames: readonly string[];
}

/**
 * The jobs, runs and webhook secrets tables, built from the same definitions
 * the sandbox and the integration tests create their tables from
 * (shared/storage/tables.ts), so keys and indexes cannot drift between local
 * and deployed. The webhook secrets table is encrypted with a key of its own,
 * which only the roles granted it (the API's and the worker's) may use.
 */
export class Storage extends Construct {
  readonly jobs: DeclaredTable;
  readonly runs: DeclaredTable;
  readonly webhookSecrets: DeclaredTable;
  readonly webhookSecretsKey: Key;

  constructor(scope: Construct, id: string, props: StorageProps) {
    super(scope, id);
    const dev = isDevStage(props.settings.stage);
    const lifecycle = {
      removalPolicy: dev ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
      deletionProtection: !dev,
    };
    const capacity = props.settings.tableCapacity;
    // Table names are left to CloudFormation so stages (and replacements) never collide.
    this.jobs = tableFromDefinition(this, "JobsTable", jobsTableDefinition("jobs"), {
      ...lifecycle,
      timeToLiveAttribute: JOBS_TTL_ATTRIBUTE,
      capacity,
    });
    this.runs = tableFromDefinition(this, "RunsTable", runsTableDefinition("runs"), {
      ...lifecycle,
      timeToLiveAttribute: RUNS_TTL_ATTRIBUTE,
      capacity,
    });
    this.webhookSecretsKey = new Key(this, "WebhookSecretsKey", {
      description: "Encrypts the tenants' webhook signing secrets (the webhook secrets table)",
      enableKeyRotation: true,
      removalPolicy: lifecycle.removalPolicy,
    });
    // On demand whatever the setting: a few reads a minute, below any provisioned floor's price.
    this.webhookSecrets = tableFromDefinition(
      this,
      "WebhookSecretsTable",
      webhookSecretsTableDefinition("webhook-secrets"),
      {
        ...lifecycle,
        encryption: TableEncryption.CUSTOMER_MANAGED,
        encryptionKey: this.webhookSecretsKey,
        capacity: { mode: "on-demand" },
      },
    );
  }
}

function attributeOf(
  definitions: readonly AttributeDefinition[],
  element: KeySchemaElement | undefined,
): Attribute {
  const name = element?.AttributeName;
  const definition = definitions.find((d) => d.AttributeName === name);
  if (name === undefined || definition === undefined) {
    throw new Error(`key attribute ${String(name)} has no attribute definition`);
  }
  const types = { S: AttributeType.STRING, N: AttributeType.NUMBER, B: AttributeType.BINARY };
  const type = definition.AttributeType;
  if (type === undefined) throw new Error(`attribute ${name} has no type`);
  return { name, type: types[type] };
}

function keysOf(definitions: readonly AttributeDefinition[], schema: readonly KeySchemaElement[]) {
  const hash = schema.find((k) => k.KeyType === "HASH");
  const range = schema.find((k) => k.KeyType === "RANGE");
  return {
    partitionKey: attributeOf(definitions, hash),
    ...(range ? { sortKey: attributeOf(definitions, range) } : {}),
  };
}

function tableFromDefinition(
  scope: Construct,
  id: string,
  definition: CreateTableCommandInput,
  extra: {
    removalPolicy: RemovalPolicy;
    deletionProtection: boolean;
    timeToLiveAttribute?: string;
    encryption?: TableEncryption;
    encryptionKey?: Key;
    capacity: TableCapacity;
  },
): DeclaredTable {
  const { capacity, ...tableProps } = extra;
  const attributes = definition.AttributeDefinitions ?? [];
  // Provisioned at the floor; auto scaling moves it from there.
  const units =
    capacity.mode === "provisioned"
      ? { readCapacity: capacity.minUnits, writeCapacity: capacity.minUnits }
      : {};
  const table = new Table(scope, id, {
    ...keysOf(attributes, definition.KeySchema ?? []),
    billingMode:
      capacity.mode === "provisioned" ? BillingMode.PROVISIONED : BillingMode.PAY_PER_REQUEST,
    ...units,
    pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
    ...tableProps,
  });
  const projections = {
    ALL: ProjectionType.ALL,
    KEYS_ONLY: ProjectionType.KEYS_ONLY,
    INCLUDE: ProjectionType.INCLUDE,
  };
  const indexNames: string[] = [];
  for (const index of definition.GlobalSecondaryIndexes ?? []) {
    if (index.IndexName === undefined) throw new Error(`${id}: an index has no name`);
    const projection = index.Projection?.ProjectionType ?? "ALL";
    table.addGlobalSecondaryIndex({
      indexName: index.IndexName,
      ...keysOf(attributes, index.KeySchema ?? []),
      projectionType: projections[projection],
      ...(index.Projection?.NonKeyAttributes
        ? { nonKeyAttributes: index.Projection.NonKeyAttributes }
        : {}),
      ...units,
    });
    indexNames.push(index.IndexName);
  }
  if (capacity.mode === "provisioned") autoScale(table, indexNames, capacity);
  return { table, indexNames };
}

/**
 * Target tracking on reads and writes of the table and of each index, each index throttled on
 * its own capacity: an index below its writes throttles the table's writes too.
 */
function autoScale(table: Table, indexNames: readonly string[], capacity: ProvisionedCapacity) {
  const range = (maxCapacity: number) => ({ minCapacity: capacity.minUnits, maxCapacity });
  const tracking = { targetUtilizationPercent: capacity.targetUtilizationPercent };
  const reads = range(capacity.maxReadUnits);
  const writes = range(capacity.maxWriteUnits);
  table.autoScaleReadCapacity(reads).scaleOnUtilization(tracking);
  table.autoScaleWriteCapacity(writes).scaleOnUtilization(tracking);
  for (const indexName of indexNames) {
    table.autoScaleGlobalSecondaryIndexReadCapacity(indexName, reads).scaleOnUtilization(tracking);
    table
      .autoScaleGlobalSecondaryIndexWriteCapacity(indexName, writes)
      .scaleOnUtilization(tracking);
  }
}
