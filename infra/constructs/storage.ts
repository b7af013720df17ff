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
    // Table names are left to CloudFormation so stages (and replacements) never collide.
    this.jobs = tableFromDefinition(this, "JobsTable", jobsTableDefinition("jobs"), {
      ...lifecycle,
      timeToLiveAttribute: JOBS_TTL_ATTRIBUTE,
    });
    this.runs = tableFromDefinition(this, "RunsTable", runsTableDefinition("runs"), {
      ...lifecycle,
      timeToLiveAttribute: RUNS_TTL_ATTRIBUTE,
    });
    this.webhookSecretsKey = new Key(this, "WebhookSecretsKey", {
      description: "Encrypts the tenants' webhook signing secrets (the webhook secrets table)",
      enableKeyRotation: true,
      removalPolicy: lifecycle.removalPolicy,
    });
    this.webhookSecrets = tableFromDefinition(
      this,
      "WebhookSecretsTable",
      webhookSecretsTableDefinition("webhook-secrets"),
      {
        ...lifecycle,
        encryption: TableEncryption.CUSTOMER_MANAGED,
        encryptionKey: this.webhookSecretsKey,
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
  },
): DeclaredTable {
  const attributes = definition.AttributeDefinitions ?? [];
  const table = new Table(scope, id, {
    ...keysOf(attributes, definition.KeySchema ?? []),
    billingMode:
      definition.BillingMode === "PROVISIONED"
        ? BillingMode.PROVISIONED
        : BillingMode.PAY_PER_REQUEST,
    pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
    ...extra,
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
    });
    indexNames.push(index.IndexName);
  }
  return { table, indexNames };
}
