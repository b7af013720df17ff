import {
  Aws,
  CfnCondition,
  CfnOutput,
  CfnResource,
  Fn,
  Stack,
  type StackProps,
  Token,
} from "aws-cdk-lib";
import type { Construct, IConstruct } from "constructs";
import { ENV } from "../shared/config.js";
import { Api } from "./constructs/api.js";
import { Dispatch } from "./constructs/dispatch.js";
import { Observability } from "./constructs/observability.js";
import { Queues } from "./constructs/queues.js";
import { Storage } from "./constructs/storage.js";
import { DEAD_LETTER_CONSUMER_TIMEOUT, Worker } from "./constructs/worker.js";
import {
  engineEnvironment,
  refuseAlarmTopicElsewhere,
  type SchedulerSettings,
} from "./settings.js";

export interface SchedulerStackProps extends StackProps {
  readonly settings: SchedulerSettings;
}

/** The whole scheduler: one construct per component of docs/architecture.md. */
export class SchedulerStack extends Stack {
  readonly settings: SchedulerSettings;
  readonly storage: Storage;
  readonly queues: Queues;
  readonly dispatch: Dispatch;
  readonly worker: Worker;
  readonly api: Api;
  readonly observability: Observability;

  constructor(scope: Construct, id: string, props: SchedulerStackProps) {
    super(scope, id, props);
    const { settings } = props;
    // Only a region given at synth (env) can be compared; a token's is known at deploy alone.
    if (!Token.isUnresolved(this.region)) refuseAlarmTopicElsewhere(settings, this.region);
    this.settings = settings;
    this.storage = new Storage(this, "Storage", { settings });
    this.queues = new Queues(this, "Queues", {
      settings,
      deadLetterConsumerTimeout: DEAD_LETTER_CONSUMER_TIMEOUT,
    });
    // What engineFromEnv (shared/runtime.ts) requires of every engine-backed function.
    const environment = {
      [ENV.jobsTable]: this.storage.jobs.table.tableName,
      [ENV.runsTable]: this.storage.runs.table.tableName,
      [ENV.webhookSecretsTable]: this.storage.webhookSecrets.table.tableName,
      [ENV.queueHigh]: this.queues.work.high.queueUrl,
      [ENV.queueNormal]: this.queues.work.normal.queueUrl,
      [ENV.queueLow]: this.queues.work.low.queueUrl,
      ...engineEnvironment(settings),
    };
    const shared = { settings, storage: this.storage, queues: this.queues };
    this.dispatch = new Dispatch(this, "Dispatch", { ...shared, engineEnvironment: environment });
    this.api = new Api(this, "Api", { ...shared, engineEnvironment: environment });
    this.worker = new Worker(this, "Worker", {
      ...shared,
      engineEnvironment: environment,
      apiUrl: this.api.stage.url,
    });
    // A deploy updates the API function last. Only the API makes what an earlier engine cannot
    // run (an `after` job, an async target), so a client can make one only once the worker, the
    // DLQ consumer, the dispatcher and the tick run the new code (docs/deploy.md, "Upgrade and
    // rollback").
    const apiFunction = cfnResourceOf(this.api.handler.fn);
    for (const engineFunction of [
      this.worker.worker,
      this.worker.deadLetterConsumer,
      this.dispatch.dispatcher,
      this.dispatch.tick,
    ]) {
      apiFunction.addResourceDependency(cfnResourceOf(engineFunction.fn));
    }
    this.observability = new Observability(this, "Observability", {
      settings,
      queues: this.queues,
      dispatch: this.dispatch,
      worker: this.worker,
      api: this.api,
      storage: this.storage,
    });

    const output = (id: string, value: string, description: string) =>
      new CfnOutput(this, id, { value, description });
    output("ApiUrl", this.api.stage.url, "Base URL of the HTTP API");
    output("JobsTableName", this.storage.jobs.table.tableName, "Jobs table");
    output("RunsTableName", this.storage.runs.table.tableName, "Runs table (history, TTL)");
    output("QueueUrlHigh", this.queues.work.high.queueUrl, "High-priority work queue");
    output("QueueUrlNormal", this.queues.work.normal.queueUrl, "Normal-priority work queue");
    output("QueueUrlLow", this.queues.work.low.queueUrl, "Low-priority work queue");
    output(
      "AsyncFailuresQueueUrl",
      this.queues.asyncFailures.queueUrl,
      "Tick and dispatcher invocations that failed for good",
    );
    output(
      "WebhookSecretsTableName",
      this.storage.webhookSecrets.table.tableName,
      "Each tenant's webhook signing secrets (KMS-encrypted; read them through GET /webhook-secret)",
    );
    output("AlarmTopicArn", this.observability.topic.topicArn, "Where the alarms go");
    output(
      "DashboardUrl",
      `${consoleOrigin(this)}/cloudwatch/home?region=${Aws.REGION}#dashboards:name=${this.observability.dashboard.dashboardName}`,
      "CloudWatch dashboard",
    );
  }
}

/**
 * The AWS console of the partition the stack is deployed in, known at deploy only (the app's stack
 * is env-agnostic). China and GovCloud have consoles of their own, on their own domains, which
 * take the region from `?region=`; any other partition gets the commercial console's regional
 * host. Conditions rather than a mapping keyed by partition: a partition the mapping lacked would
 * fail the deploy (Fn::FindInMap) for the sake of a link.
 */
function consoleOrigin(stack: Stack): string {
  const inPartition = (id: string, partition: string) =>
    new CfnCondition(stack, id, { expression: Fn.conditionEquals(Aws.PARTITION, partition) })
      .logicalId;
  return Token.asString(
    Fn.conditionIf(
      inPartition("InChinaPartition", "aws-cn"),
      "https://console.amazonaws.cn",
      Fn.conditionIf(
        inPartition("InGovCloudPartition", "aws-us-gov"),
        "https://console.amazonaws-us-gov.com",
        `https://${Aws.REGION}.console.aws.amazon.com`,
      ),
    ),
  );
}

function cfnResourceOf(construct: IConstruct): CfnResource {
  const resource = construct.node.defaultChild;
  if (!CfnResource.isCfnResource(resource))
    throw new Error(`${construct.node.path} has no CloudFormation resource`);
  return resource;
}
