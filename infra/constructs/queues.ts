import { Duration, RemovalPolicy, Validations } from "aws-cdk-lib";
import { Queue, QueueEncryption } from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import { PRIORITIES, type Priority } from "../../shared/model.js";
import type { SchedulerSettings } from "../settings.js";

export interface QueuesProps {
  readonly settings: SchedulerSettings;
  /** The DLQ consumer's timeout: its queues must stay invisible at least that long. */
  readonly deadLetterConsumerTimeout: Duration;
}

const MAX_RETENTION = Duration.days(14);

/**
 * One work queue per priority, each with its own redrive DLQ, plus a queue
 * for asynchronous invocations that failed for good (tick and dispatcher).
 * Queues hold no state the tables do not also hold, so they are always
 * destroyed with the stack.
 */
export class Queues extends Construct {
  readonly work: Readonly<Record<Priority, Queue>>;
  readonly deadLetters: Readonly<Record<Priority, Queue>>;
  readonly asyncFailures: Queue;

  constructor(scope: Construct, id: string, props: QueuesProps) {
    super(scope, id);
    const { settings } = props;
    const common = {
      encryption: QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      removalPolicy: RemovalPolicy.DESTROY,
    };
    const work: Partial<Record<Priority, Queue>> = {};
    const deadLetters: Partial<Record<Priority, Queue>> = {};
    for (const priority of PRIORITIES) {
      const dlq = new Queue(this, `DeadLetters-${priority}`, {
        ...common,
        retentionPeriod: MAX_RETENTION,
        // AWS advises six times the consumer's timeout, so a batch is not redelivered mid-retry.
        visibilityTimeout: Duration.seconds(props.deadLetterConsumerTimeout.toSeconds() * 6),
      });
      deadLetters[priority] = dlq;
      work[priority] = new Queue(this, `Work-${priority}`, {
        ...common,
        // An event source is refused unless visibility >= the function's timeout. The worker
        // sets a message's visibility to the run lease at each heartbeat and when a delivery
        // fails; a worker that dies before either leaves its run to the reaper.
        visibilityTimeout: Duration.seconds(settings.workerTimeoutSeconds),
        retentionPeriod: MAX_RETENTION,
        deadLetterQueue: { queue: dlq, maxReceiveCount: settings.maxReceiveCount },
      });
    }
    this.work = complete(work);
    this.deadLetters = complete(deadLetters);
    this.asyncFailures = new Queue(this, "AsyncFailures", {
      ...common,
      retentionPeriod: MAX_RETENTION,
    });
    Validations.of(this.asyncFailures).acknowledge({
      id: "AwsSolutions-SQS3",
      reason:
        "This queue is itself a dead-letter destination (Lambda on-failure destination and the tick rule's DLQ); nothing consumes it, operators inspect it after its alarm.",
    });
  }

  get allWork(): Queue[] {
    return PRIORITIES.map((p) => this.work[p]);
  }

  get allDeadLetters(): Queue[] {
    return PRIORITIES.map((p) => this.deadLetters[p]);
  }
}

function complete<T>(partial: Partial<Record<Priority, T>>): Readonly<Record<Priority, T>> {
  const { high, normal, low } = partial;
  if (high === undefined || normal === undefined || low === undefined) {
    throw new Error("a queue per priority is required");
  }
  return { high, normal, low };
}
