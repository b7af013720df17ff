import { Stack } from "aws-cdk-lib";
import type { Table } from "aws-cdk-lib/aws-dynamodb";
import { type IGrantable, PolicyStatement } from "aws-cdk-lib/aws-iam";
import type { IKey } from "aws-cdk-lib/aws-kms";
import type { IQueue } from "aws-cdk-lib/aws-sqs";

/**
 * Item-level DynamoDB actions (and Scan). A TransactWriteItems call is authorised item by
 * item against PutItem / UpdateItem / DeleteItem / ConditionCheckItem; there is
 * no IAM action of its own for it.
 */
type ItemAction =
  | "GetItem"
  | "BatchGetItem"
  | "PutItem"
  | "UpdateItem"
  | "DeleteItem"
  | "ConditionCheckItem"
  | "BatchWriteItem"
  | "Query"
  | "Scan";

export type QueueAction = "SendMessage" | "ChangeMessageVisibility";

export interface TableAccess {
  readonly table: Table;
  /** Known index names: a typo here would otherwise grant a Query that matches nothing. */
  readonly indexNames: readonly string[];
  readonly actions?: readonly ItemAction[];
  /** Index name → actions on it (a Query on a GSI needs its own resource ARN). */
  readonly indexes?: Readonly<Record<string, readonly "Query"[]>>;
}

/** Grants exactly the listed actions on a table and its indexes, no wildcard actions or resources. */
export function allowTable(grantee: IGrantable, access: TableAccess): void {
  const { table, actions = [], indexes = {} } = access;
  if (actions.length > 0) {
    grantee.grantPrincipal.addToPrincipalPolicy(
      new PolicyStatement({
        actions: actions.map((action) => `dynamodb:${action}`),
        resources: [table.tableArn],
      }),
    );
  }
  for (const [indexName, indexActions] of Object.entries(indexes)) {
    if (!access.indexNames.includes(indexName)) {
      throw new Error(`no index ${indexName} on ${table.node.path}`);
    }
    grantee.grantPrincipal.addToPrincipalPolicy(
      new PolicyStatement({
        actions: indexActions.map((action) => `dynamodb:${action}`),
        resources: [`${table.tableArn}/index/${indexName}`],
      }),
    );
  }
}

export function allowQueues(
  grantee: IGrantable,
  queues: readonly IQueue[],
  actions: readonly QueueAction[],
): void {
  grantee.grantPrincipal.addToPrincipalPolicy(
    new PolicyStatement({
      actions: actions.map((action) => `sqs:${action}`),
      resources: queues.map((queue) => queue.queueArn),
    }),
  );
}

/**
 * What DynamoDB needs of a caller's role to read and write a table encrypted
 * with `key`, usable only through DynamoDB in this region: the role cannot
 * decrypt anything with the key directly.
 */
export function allowTableKey(grantee: IGrantable, key: IKey): void {
  grantee.grantPrincipal.addToPrincipalPolicy(
    new PolicyStatement({
      actions: [
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:Encrypt",
        "kms:GenerateDataKey",
        "kms:ReEncryptFrom",
        "kms:ReEncryptTo",
      ],
      resources: [key.keyArn],
      conditions: {
        // DynamoDB's endpoint host in this region, its suffix the partition's (AWS::URLSuffix:
        // amazonaws.com.cn in China), or no call through DynamoDB would match there.
        StringEquals: {
          "kms:ViaService": `dynamodb.${Stack.of(key).region}.${Stack.of(key).urlSuffix}`,
        },
      },
    }),
  );
}
