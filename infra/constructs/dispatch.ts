import { Duration } from "aws-cdk-lib";
import { Rule, Schedule } from "aws-cdk-lib/aws-events";
import { LambdaFunction } from "aws-cdk-lib/aws-events-targets";
import { PolicyStatement } from "aws-cdk-lib/aws-iam";
import { SqsDestination } from "aws-cdk-lib/aws-lambda-destinations";
import { Construct } from "constructs";
import { ENV } from "../../shared/config.js";
import { RUNS_INFLIGHT_INDEX } from "../../shared/storage/tables.js";
import { allowQueues, allowTable } from "../access.js";
import { dispatcherTimeoutSeconds, type SchedulerSettings } from "../settings.js";
import type { Queues } from "./queues.js";
import { SchedulerFunction } from "./scheduler-function.js";
import type { Storage } from "./storage.js";

export interface DispatchProps {
  readonly settings: SchedulerSettings;
  readonly storage: Storage;
  readonly queues: Queues;
  /** Table, queue and settings variables every engine-backed function reads. */
  readonly engineEnvironment: Readonly<Record<string, string>>;
}

/**
 * The once-a-minute rule, the tick (which fans out one asynchronous
 * dispatcher invocation per shard, then runs the reaper), and the dispatcher.
 */
export class Dispatch extends Construct {
  readonly tick: SchedulerFunction;
  readonly dispatcher: SchedulerFunction;
  readonly rule: Rule;

  constructor(scope: Construct, id: string, props: DispatchProps) {
    super(scope, id);
    const { settings, storage, queues } = props;
    const onFailure = new SqsDestination(queues.asyncFailures);

    this.dispatcher = new SchedulerFunction(this, "Dispatcher", {
      component: "dispatcher",
      description: "Sweeps one shard's due buckets: claims due entries and enqueues their runs",
      // A pass is bounded by its shard lease (a backlog or a first-pass scan may take half of it);
      // the next tick's pass takes over a lapsed one. A minute at least, one tick's worth.
      timeout: Duration.seconds(dispatcherTimeoutSeconds(settings)),
      memorySize: 512,
      environment: props.engineEnvironment,
      settings,
    });
    this.dispatcher.fn.configureAsyncInvoke({
      // One retry covers a transient failure; older events are superseded by the next tick's pass.
      retryAttempts: 1,
      maxEventAge: Duration.minutes(2),
      onFailure,
    });
    // Lease (UpdateItem), bucket sweep (Query, consistent), claim transaction (Delete the due
    // entry, Update the job or, for a retry entry, ConditionCheck it, Put the next entry), orphan
    // DeleteItem;
    // a shard's first pass ever finds its backlog by a consistent Scan, once in its life; a
    // trigger entry's fan-out reads each dependent (GetItem) and checks it in its transaction.
    allowTable(this.dispatcher.fn, {
      ...storage.jobs,
      actions: [
        "GetItem",
        "Query",
        "Scan",
        "UpdateItem",
        "DeleteItem",
        "PutItem",
        "ConditionCheckItem",
      ],
    });
    // A claim puts its QUEUED runs and its SKIPPED records (PutItem, each before its
    // transaction); a claim that fails for good deletes the runs it put (DeleteItem); one that
    // loses its entry to a cancel ends them CANCELLED (UpdateItem).
    allowTable(this.dispatcher.fn, {
      ...storage.runs,
      actions: ["PutItem", "DeleteItem", "UpdateItem"],
    });
    allowQueues(this.dispatcher.fn, queues.allWork, ["SendMessage"]);

    this.tick = new SchedulerFunction(this, "Tick", {
      component: "tick",
      description: "Once a minute: one dispatcher invocation per shard, then the reaper",
      timeout: Duration.seconds(60),
      memorySize: 256,
      environment: {
        ...props.engineEnvironment,
        [ENV.dispatcherFunction]: this.dispatcher.fn.functionName,
      },
      settings,
    });
    this.tick.fn.configureAsyncInvoke({
      // A retried tick would land on top of the next one a minute later.
      retryAttempts: 0,
      maxEventAge: Duration.seconds(60),
      onFailure,
    });
    // Not grantInvoke: that also grants every version and alias (`:*`); the tick invokes $LATEST.
    this.tick.role.addToPrincipalPolicy(
      new PolicyStatement({
        actions: ["lambda:InvokeFunction"],
        resources: [this.dispatcher.fn.functionArn],
      }),
    );
    // The reaper: reads overdue runs' keys from the inflight index past its cursor, then the runs
    // (BatchGetItem: the index holds keys only), pushes each one's deadline on and resends it;
    // then moves the shard's cursor (a jobs table item). A run it re-sends that has waited past half
    // the retention has its job read (GetItem) and, when COMPLETED, kept for it (UpdateItem).
    allowTable(this.tick.fn, {
      ...storage.runs,
      actions: ["BatchGetItem", "UpdateItem"],
      indexes: { [RUNS_INFLIGHT_INDEX]: ["Query"] },
    });
    allowTable(this.tick.fn, {
      ...storage.jobs,
      actions: ["BatchGetItem", "GetItem", "UpdateItem"],
    });
    allowQueues(this.tick.fn, queues.allWork, ["SendMessage"]);

    this.rule = new Rule(this, "EveryMinute", {
      description: "Starts a dispatcher pass per shard and the reaper",
      schedule: Schedule.rate(Duration.minutes(1)),
    });
    this.rule.addTarget(
      new LambdaFunction(this.tick.fn, {
        retryAttempts: 2,
        maxEventAge: Duration.minutes(1),
        deadLetterQueue: queues.asyncFailures,
      }),
    );
  }
}
