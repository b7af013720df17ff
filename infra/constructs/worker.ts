import { Duration } from "aws-cdk-lib";
import { SqsEventSource } from "aws-cdk-lib/aws-lambda-event-sources";
import { Construct } from "constructs";
import { ENV } from "../../shared/config.js";
import { PRIORITIES } from "../../shared/model.js";
import { allowQueues, allowTable, allowTableKey } from "../access.js";
import { type SchedulerSettings, workerEventSourceConcurrency } from "../settings.js";
import type { Queues } from "./queues.js";
import { SchedulerFunction } from "./scheduler-function.js";
import type { Storage } from "./storage.js";

export const DEAD_LETTER_CONSUMER_TIMEOUT = Duration.seconds(30);
/** AWS's lower bound for an SQS event source's maximum concurrency. */
const MIN_EVENT_SOURCE_CONCURRENCY = 2;

export interface WorkerProps {
  readonly settings: SchedulerSettings;
  readonly storage: Storage;
  readonly queues: Queues;
  readonly engineEnvironment: Readonly<Record<string, string>>;
  /** The API's base URL: async targets are told to heartbeat and complete their runs there. */
  readonly apiUrl: string;
}

/**
 * The worker (one SQS event source per priority, concurrency capped per
 * priority so high drains first, low keeping its share: the starvation guard) and the consumer of the redrive DLQs that
 * marks crashed runs DEAD.
 */
export class Worker extends Construct {
  readonly worker: SchedulerFunction;
  readonly deadLetterConsumer: SchedulerFunction;

  constructor(scope: Construct, id: string, props: WorkerProps) {
    super(scope, id);
    const { settings, storage, queues } = props;

    this.worker = new SchedulerFunction(this, "Worker", {
      component: "worker",
      description:
        "Runs queued runs: fenced start, heartbeat, handler, result, retry or dead letter",
      timeout: Duration.seconds(settings.workerTimeoutSeconds),
      memorySize: 512,
      environment: {
        ...props.engineEnvironment,
        // Deployed workers refuse webhook targets on private addresses (SSRF); only the sandbox allows them.
        [ENV.allowPrivateTargets]: "false",
        [ENV.apiUrl]: props.apiUrl,
      },
      settings,
    });
    // The signing secrets of the tenants it delivers for: read, or made on first use (a
    // conditional PutItem).
    allowTable(this.worker.fn, { ...storage.webhookSecrets, actions: ["GetItem", "PutItem"] });
    allowTableKey(this.worker.fn, storage.webhookSecretsKey);
    // Job read (GetItem; BatchGetItem with its run's, by a first delivery), admission and one-off
    // completion (UpdateItem), a retry's due entry (PutItem, before the failed run's ending; its
    // DeleteItem when a cancel refused that ending), an ending's transaction with an upstream's
    // trigger entry (Put); the fan-out of a
    // trigger to its dependents (GetItem, ConditionCheck each dependent, DeleteItem the entry); the
    // tenant's concurrent-runs quota: its override and slots read in one Query of its quota
    // partition, a slot taken (PutItem), extended (UpdateItem) and freed (DeleteItem).
    allowTable(this.worker.fn, {
      ...storage.jobs,
      actions: [
        "GetItem",
        "BatchGetItem",
        "UpdateItem",
        "PutItem",
        "DeleteItem",
        "ConditionCheckItem",
        "Query",
      ],
    });
    // A first delivery's read of its run with its job (BatchGetItem: its start is written with
    // the run's first write), start (which returns the run), heartbeat, requeue, park, ending
    // (UpdateItem), a failure's next attempt as a QUEUED run (PutItem, before the ending; taken back
    // with UpdateItem), admission's read of the runs its job lists and a retry's read of the
    // attempt before it (BatchGetItem).
    allowTable(this.worker.fn, {
      ...storage.runs,
      actions: ["UpdateItem", "PutItem", "BatchGetItem"],
    });
    // Visibility: heartbeats, failed deliveries and redeliveries; resends of early, retried and buffered runs.
    allowQueues(this.worker.fn, queues.allWork, ["SendMessage", "ChangeMessageVisibility"]);
    const concurrency = workerEventSourceConcurrency(settings);
    for (const priority of PRIORITIES) {
      this.worker.fn.addEventSource(
        new SqsEventSource(queues.work[priority], {
          batchSize: settings.workerBatchSize,
          reportBatchItemFailures: true,
          maxConcurrency: concurrency[priority],
        }),
      );
    }

    this.deadLetterConsumer = new SchedulerFunction(this, "DeadLetterConsumer", {
      component: "dlq",
      description: "Marks the runs of messages that crashed their worker every time as DEAD",
      timeout: DEAD_LETTER_CONSUMER_TIMEOUT,
      memorySize: 256,
      environment: props.engineEnvironment,
      settings,
    });
    // endUnownedRun: read the run, conditionally end it, drop it from the job's active runs.
    allowTable(this.deadLetterConsumer.fn, { ...storage.runs, actions: ["GetItem", "UpdateItem"] });
    // The job's dependents (GetItem) and their trigger entry, written with the DEAD ending (PutItem).
    allowTable(this.deadLetterConsumer.fn, {
      ...storage.jobs,
      actions: ["GetItem", "UpdateItem", "PutItem"],
    });
    for (const priority of PRIORITIES) {
      this.deadLetterConsumer.fn.addEventSource(
        new SqsEventSource(queues.deadLetters[priority], {
          batchSize: 10,
          reportBatchItemFailures: true,
          maxConcurrency: MIN_EVENT_SOURCE_CONCURRENCY,
        }),
      );
    }
  }
}
