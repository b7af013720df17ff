import { Annotations, ArnFormat, Duration, Stack } from "aws-cdk-lib";
import {
  Alarm,
  AlarmStatusWidget,
  CfnInsightRule,
  ComparisonOperator,
  Dashboard,
  GraphWidget,
  type IMetric,
  MathExpression,
  Metric,
  TreatMissingData,
} from "aws-cdk-lib/aws-cloudwatch";
import { SnsAction } from "aws-cdk-lib/aws-cloudwatch-actions";
import { PolicyStatement, ServicePrincipal } from "aws-cdk-lib/aws-iam";
import { type ITopic, Topic } from "aws-cdk-lib/aws-sns";
import { EmailSubscription } from "aws-cdk-lib/aws-sns-subscriptions";
import { Construct } from "constructs";
import { PRIORITIES } from "../../shared/model.js";
import { METRICS, type MetricName, TENANT_LOG_EVENTS } from "../../shared/observability.js";
import { type Component, SERVICE_NAMES } from "../lambda-environment.js";
import { isDevStage, type SchedulerSettings } from "../settings.js";
import type { Api } from "./api.js";
import type { Dispatch } from "./dispatch.js";
import type { Queues } from "./queues.js";
import type { SchedulerFunction } from "./scheduler-function.js";
import type { DeclaredTable, Storage } from "./storage.js";
import type { Worker } from "./worker.js";

export interface ObservabilityProps {
  readonly settings: SchedulerSettings;
  readonly queues: Queues;
  readonly dispatch: Dispatch;
  readonly worker: Worker;
  readonly api: Api;
  readonly storage: Storage;
}

const MINUTE = Duration.minutes(1);
/** How far behind its settle line the reaper may read before it alarms: lost runs re-sent 5 min late. */
const REAPER_BEHIND_ALARM_MS = 5 * 60_000;
/**
 * How long a shard may go unread by the reaper before it alarms (`ReaperLongestUnread`): the same
 * 5 minutes of lateness for a lost run's re-send. Every shard is read within ⌈S ÷ K⌉ ticks (K the
 * shards a tick reaches), so the metric stays within ⌈S ÷ K⌉ − 1 minutes: 0 while a tick reaches
 * every shard (all 1,024 unless each costs more than about 38 ms); past 5 minutes only when a tick
 * reaches fewer than about a sixth of the shards, or a shard's reads fail or outlast the tick's
 * time every time it comes round, which no going round cures.
 */
const REAPER_UNREAD_ALARM_MS = 5 * 60_000;

/**
 * A table's ReadThrottleEvents and WriteThrottleEvents, and each of its global secondary
 * indexes': with the TableName dimension alone DynamoDB counts the table's own events, an index's
 * need GlobalSecondaryIndexName too. Events rather than ThrottledRequests, which has a metric per
 * operation (TableName and Operation) and counts a batch only when all of it was throttled. Keyed
 * by math-expression id, labelled with what they count.
 */
function throttleEventsOf(name: string, declared: DeclaredTable): Record<string, Metric> {
  const events: Record<string, Metric> = {};
  const targets = [
    { id: "table", label: name, dimensions: {} },
    ...declared.indexNames.map((index, i) => ({
      id: `index${i}`,
      label: `${name} ${index} index`,
      dimensions: { GlobalSecondaryIndexName: index },
    })),
  ];
  for (const { id, label, dimensions } of targets) {
    for (const [kind, metricName] of [
      ["reads", "ReadThrottleEvents"],
      ["writes", "WriteThrottleEvents"],
    ] as const) {
      events[`${id}_${kind}`] = new Metric({
        namespace: "AWS/DynamoDB",
        metricName,
        dimensionsMap: { TableName: declared.table.tableName, ...dimensions },
        statistic: "Sum",
        period: MINUTE,
        label: `${label} ${kind}`,
      });
    }
  }
  return events;
}

/**
 * Alarms (to an SNS topic) and a dashboard over the engine's Powertools
 * metrics and the AWS metrics of the queues, functions and tables. Every engine
 * metric carries the emitting function's `service` dimension (Powertools
 * adds it), so each reference names the service that emits it.
 */
export class Observability extends Construct {
  readonly topic: ITopic;
  readonly dashboard: Dashboard;
  readonly alarms: Alarm[] = [];
  /** Contributor Insights rules: runs, lag and throttles per tenant, read from the logs. */
  readonly tenantRules: CfnInsightRule[] = [];

  private readonly settings: SchedulerSettings;

  constructor(scope: Construct, id: string, props: ObservabilityProps) {
    super(scope, id);
    const { settings, queues, dispatch, worker, api, storage } = props;
    this.settings = settings;

    if (settings.alarmTopicArn) {
      this.topic = Topic.fromTopicArn(this, "AlarmTopic", settings.alarmTopicArn);
    } else {
      const topic = new Topic(this, "AlarmTopic", {
        displayName: `Scheduler alarms (${settings.stage})`,
        enforceSSL: true,
      });
      // A topic policy replaces SNS's default one, which let the account's alarms publish: with
      // enforceSSL's Deny alone, every alarm's notification would be refused (seen only in the
      // alarm's history). This stack's region and account's alarms may publish, nothing else.
      topic.addToResourcePolicy(
        new PolicyStatement({
          sid: "AllowThisAccountsAlarms",
          principals: [new ServicePrincipal("cloudwatch.amazonaws.com")],
          actions: ["sns:Publish"],
          resources: [topic.topicArn],
          conditions: {
            ArnLike: {
              "aws:SourceArn": Stack.of(this).formatArn({
                service: "cloudwatch",
                resource: "alarm",
                resourceName: "*",
                arnFormat: ArnFormat.COLON_RESOURCE_NAME,
              }),
            },
          },
        }),
      );
      if (settings.alarmEmail) topic.addSubscription(new EmailSubscription(settings.alarmEmail));
      // Context holds for one command: a deploy that leaves out -c alarmEmail removes the
      // subscription, and every alarm then fires to no one.
      else if (!isDevStage(settings.stage)) {
        Annotations.of(this).addWarningV2(
          "scheduler:alarms-unsubscribed",
          `stage ${settings.stage}: no alarmEmail or alarmTopicArn, so the alarms go to a topic nobody is subscribed to; give one (in cdk.json, so every deploy of the stage keeps it) or subscribe to the AlarmTopic yourself`,
        );
      }
      this.topic = topic;
    }
    const action = new SnsAction(this.topic);
    const functions: [Component, SchedulerFunction][] = [
      ["api", api.handler],
      ["tick", dispatch.tick],
      ["dispatcher", dispatch.dispatcher],
      ["worker", worker.worker],
      ["dlq", worker.deadLetterConsumer],
    ];
    const alarm = (
      alarmId: string,
      metric: IMetric,
      options: {
        description: string;
        threshold: number;
        operator?: ComparisonOperator;
        evaluationPeriods?: number;
        datapointsToAlarm?: number;
        missing?: TreatMissingData;
      },
    ) => {
      const created = new Alarm(this, alarmId, {
        metric,
        alarmDescription: options.description,
        threshold: options.threshold,
        comparisonOperator:
          options.operator ?? ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: options.evaluationPeriods ?? 1,
        datapointsToAlarm: options.datapointsToAlarm ?? options.evaluationPeriods ?? 1,
        treatMissingData: options.missing ?? TreatMissingData.NOT_BREACHING,
      });
      created.addAlarmAction(action);
      created.addOkAction(action);
      this.alarms.push(created);
      return created;
    };

    for (const priority of PRIORITIES) {
      const dlq = queues.deadLetters[priority];
      // The DLQ consumer drains a message within seconds, so "visible" alone would miss most;
      // every redriven message is also received by it at least once. One the consumer fails
      // stays in flight for the DLQ's visibility timeout (3 minutes) between receives: counted
      // in flight, it keeps the alarm in ALARM rather than flapping to OK and back (a
      // notification each way) every 3 minutes for as long as it fails.
      alarm(
        `DeadLetterQueue-${priority}`,
        new MathExpression({
          expression: "FILL(visible, 0) + FILL(inFlight, 0) + FILL(received, 0)",
          usingMetrics: {
            visible: dlq.metricApproximateNumberOfMessagesVisible({
              statistic: "Maximum",
              period: MINUTE,
            }),
            inFlight: dlq.metricApproximateNumberOfMessagesNotVisible({
              statistic: "Maximum",
              period: MINUTE,
            }),
            received: dlq.metricNumberOfMessagesReceived({ statistic: "Sum", period: MINUTE }),
          },
          label: `${priority} DLQ messages`,
          period: MINUTE,
        }),
        {
          description: `A ${priority}-priority message was received ${settings.maxReceiveCount} times without an acknowledgement and reached the redrive DLQ: its run is marked DEAD if it crashed its worker on every delivery, else the reaper sends it again.`,
          threshold: 1,
        },
      );
    }
    alarm(
      "AsyncInvokeFailures",
      queues.asyncFailures.metricApproximateNumberOfMessagesVisible({
        statistic: "Maximum",
        period: MINUTE,
      }),
      {
        description:
          "A tick or dispatcher invocation failed for good (after its retries); the message in the async-failures queue says why.",
        threshold: 1,
      },
    );
    alarm(
      "DeadRuns",
      new MathExpression({
        // The API records what an async target reports (and its timeouts): its DEAD runs too.
        expression: "FILL(worker, 0) + FILL(dlq, 0) + FILL(api, 0)",
        usingMetrics: {
          worker: this.metric(METRICS.runOutcome, "worker", { status: "DEAD" }),
          dlq: this.metric(METRICS.runOutcome, "dlq", { status: "DEAD" }),
          api: this.metric(METRICS.runOutcome, "api", { status: "DEAD" }),
        },
        label: "dead runs",
        period: MINUTE,
      }),
      {
        description:
          "Runs went DEAD (retries exhausted, a non-retryable error, or a crashing worker); list them under dead letters and replay.",
        threshold: 1,
      },
    );
    alarm(
      "DueEntriesSetAside",
      new MathExpression({
        expression: "FILL(setAside, 0) + FILL(refiled, 0)",
        usingMetrics: {
          setAside: this.metric(METRICS.dueEntryFailures, "dispatcher", { handling: "set-aside" }),
          refiled: this.metric(METRICS.dueEntryFailures, "dispatcher", { handling: "refiled" }),
        },
        label: "due entries set aside or refiled",
        period: MINUTE,
      }),
      {
        description:
          "A dispatcher pass set a due entry aside because no claim could process it (the ASIDE#<shard> item in the jobs table holds the entry and the error; its job runs again once edited), or could not fan a trigger entry out and filed it again a lookahead on (the dispatcher's log names the upstream run and the error; its dependents wait until the cause goes).",
        threshold: 1,
      },
    );
    alarm(
      "FenceLost",
      new MathExpression({
        expression: "FILL(worker, 0) + FILL(dispatcher, 0)",
        usingMetrics: {
          worker: this.metric(METRICS.fenceLost, "worker", { component: "worker" }),
          dispatcher: this.metric(METRICS.fenceLost, "dispatcher", { component: "dispatcher" }),
        },
        label: "lost fences",
        period: MINUTE,
      }),
      {
        description:
          "A worker's write found its run taken over by another start (the run ran twice at once: its worker stalled past its lease, or clocks disagree by more than a lease), or a dispatcher pass found its shard lease taken over (it outran its lease). The worker's log names the run ('another worker took the run over'), the dispatcher's the shard ('lost the shard lease to a takeover').",
        threshold: 1,
      },
    );
    alarm("SchedulingLagP99", this.metric(METRICS.schedulingLagMs, "worker", {}, "p99"), {
      description: `p99 of scheduling lag (start minus due time) above ${settings.lagAlarmMs} ms in 3 of 5 minutes.`,
      threshold: settings.lagAlarmMs,
      operator: ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
    });
    alarm("ReaperBehind", this.metric(METRICS.reaperBehindMs, "tick", {}, "Maximum"), {
      description:
        "The reaper's reading of a shard's in-flight runs stood more than 5 minutes behind in 3 of 5 minutes (a pass stopping at its maximum, out of the tick's time part-way through a shard, or at an entry it cannot handle): a run whose message was lost is re-sent that much later than a lease after it was due.",
      threshold: REAPER_BEHIND_ALARM_MS,
      operator: ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
    });
    alarm("ReaperShardUnread", this.metric(METRICS.reaperLongestUnreadMs, "tick", {}, "Maximum"), {
      description:
        "A shard went unread by the reaper for more than 5 minutes in 2 minutes running: it holds more than the passes deal with (they work through it, its cursor moving on: ReaperBehind), its reads fail or its first read alone outlasts the tick's time each time it comes round, or a tick reaches too few shards to go round in 5 (DynamoDB slow): a run whose message was lost there is re-sent that much later, or never.",
      threshold: REAPER_UNREAD_ALARM_MS,
      operator: ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 2,
      datapointsToAlarm: 2,
    });
    const errors = (alarmId: string, fn: SchedulerFunction, what: string) =>
      alarm(alarmId, fn.fn.metricErrors({ period: MINUTE, statistic: "Sum" }), {
        description: `${what} invocations failed in 2 of the last 3 minutes.`,
        threshold: 1,
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
      });
    // The API's own failures (its function's crashes and timeouts, storage errors answered 5xx):
    // creates, edits and cancels that did not happen, which no other alarm sees.
    // A `busy` 503 (a request that met another's write, its tenant's own contention) is one of
    // API Gateway's 5xx but no failure of the API's: the API counts those (BusyAnswers), and the
    // alarm leaves them out, so that no tenant pages the operator by racing its own requests.
    const serverErrors = new MathExpression({
      expression: "errors - FILL(busy, 0)",
      usingMetrics: {
        errors: api.httpApi.metricServerError({ period: MINUTE, statistic: "Sum" }),
        busy: this.metric(METRICS.busyAnswers, "api"),
      },
      label: "server errors (5xx but busy)",
      period: MINUTE,
    });
    alarm("ApiServerErrors", serverErrors, {
      description:
        "The API answered 5xx (server errors: its function failed or timed out, or storage refused; a busy 503 for contention between requests is not counted, one for storage's throttling is) in 3 of the last 5 minutes; callers' creates, edits and cancels failed. The API function's log group says why.",
      threshold: 1,
      evaluationPeriods: 5,
      datapointsToAlarm: 3,
    });
    errors("TickErrors", dispatch.tick, "Tick");
    errors("DispatcherErrors", dispatch.dispatcher, "Dispatcher");
    errors("WorkerErrors", worker.worker, "Worker");
    alarm(
      "TickNotRunning",
      dispatch.tick.fn.metricInvocations({ period: MINUTE, statistic: "Sum" }),
      {
        description: "The per-minute tick has not run for 3 minutes: nothing is being dispatched.",
        threshold: 1,
        operator: ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluationPeriods: 3,
        missing: TreatMissingData.BREACHING,
      },
    );
    // Lambda throttles a function when the account's concurrency in the region is used up (by
    // other functions, or a quota below the worker's event sources' maximums), or a reserved
    // concurrency was set on it: a throttled worker starts no run, so the lag alarm (started runs)
    // sees nothing, and the queue-age alarm fires only past a claim's reach and a worker timeout.
    alarm(
      "FunctionThrottles",
      new MathExpression({
        expression: functions.map(([name]) => `FILL(${name}, 0)`).join(" + "),
        usingMetrics: Object.fromEntries(
          functions.map(([name, f]) => [
            name,
            f.fn.metricThrottles({ period: MINUTE, statistic: "Sum" }),
          ]),
        ),
        label: "throttled invocations",
        period: MINUTE,
      }),
      {
        description:
          "Lambda throttled invocations of the scheduler's functions in 3 of the last 5 minutes: the account's concurrency in the region is used up (other functions, or a concurrency quota below the worker's event sources' maximums) or a function was given a reserved concurrency too low. Throttled, the worker starts runs late or not at all, the tick dispatches nothing and the API answers 5xx. The dashboard's Throttles graph says which function.",
        threshold: 1,
        evaluationPeriods: 5,
        datapointsToAlarm: 3,
      },
    );
    for (const priority of PRIORITIES) {
      alarm(
        `QueueAge-${priority}`,
        queues.work[priority].metricApproximateAgeOfOldestMessage({
          statistic: "Maximum",
          period: MINUTE,
        }),
        {
          description: `The oldest ${priority}-priority message is older than ${settings.queueAgeAlarmSeconds} s (a claim's reach + worker timeout + margin): workers are not keeping up.`,
          threshold: settings.queueAgeAlarmSeconds,
          operator: ComparisonOperator.GREATER_THAN_THRESHOLD,
          evaluationPeriods: 3,
        },
      );
    }

    // DynamoDB throttling, one alarm per table over its reads and writes and its indexes' (an
    // index's throttle events are not in its table's metrics, and a throttled index write holds
    // the table's write back). On-demand tables throttle too: a hot key's partition, a table's
    // maximum throughput, the account's per-table quota. A burst past the table's recent peak
    // throttles for a minute or two while on-demand capacity follows, and the SDK's retries (and
    // the engine's, for writes) absorb it: that raises nothing. Throttling in 3 of 5 minutes is a
    // limit hit again and again, under which runs start late and the API answers 5xx. One event
    // makes a minute count, whatever the load: at its usual load a table throttles nothing, so a
    // count threshold would only need retuning as the load grows. The alarm names the table, the
    // dashboard's graph the index and whether reads or writes. Alarms are priced per metric, so
    // one per table costs what one over all twelve metrics would.
    const tables: { id: string; name: string; declared: DeclaredTable }[] = [
      { id: "Jobs", name: "jobs", declared: storage.jobs },
      { id: "Runs", name: "runs", declared: storage.runs },
      { id: "WebhookSecrets", name: "webhook secrets", declared: storage.webhookSecrets },
    ];
    // The alarms' metrics, which the dashboard graphs too.
    const throttleEvents: Metric[] = [];
    for (const { id, name, declared } of tables) {
      const events = throttleEventsOf(name, declared);
      throttleEvents.push(...Object.values(events));
      const { indexNames } = declared;
      const indexes =
        indexNames.length === 0
          ? ""
          : ` or its ${indexNames.join(", ")} index${indexNames.length > 1 ? "es" : ""}`;
      alarm(
        `DynamoThrottles-${id}`,
        new MathExpression({
          expression: Object.keys(events)
            .map((metricId) => `FILL(${metricId}, 0)`)
            .join(" + "),
          usingMetrics: events,
          label: `${name} table throttle events`,
          period: MINUTE,
        }),
        {
          description: `DynamoDB throttled reads or writes of the ${name} table (${declared.table.tableName})${indexes} in 3 of the last 5 minutes: a limit hit again and again, not a passing burst; runs start late and the API answers 5xx. The dashboard's "DynamoDB throttle events" graph says which index, reads or writes; AWS/DynamoDB's Read/Write KeyRangeThroughput (a hot key), MaxOnDemandThroughput and AccountLimit ThrottleEvents say why.`,
          threshold: 1,
          evaluationPeriods: 5,
          datapointsToAlarm: 3,
        },
      );
    }

    this.dashboard = new Dashboard(this, "Dashboard", {
      defaultInterval: Duration.hours(3),
    });
    const graph = (title: string, left: IMetric[], extra: { stacked?: boolean } = {}) =>
      new GraphWidget({ title, left, width: 8, height: 6, ...extra });
    this.dashboard.addWidgets(
      graph(
        "Scheduling lag (ms)",
        ["p50", "p90", "p99"].map((stat) =>
          this.metric(METRICS.schedulingLagMs, "worker", {}, stat).with({ label: stat }),
        ),
      ),
      graph(
        "Runs by outcome",
        [
          ...["SUCCEEDED", "FAILED", "DEAD"].map((status) =>
            this.metric(METRICS.runOutcome, "worker", { status }).with({ label: status }),
          ),
          this.metric(METRICS.runOutcome, "dlq", { status: "DEAD" }).with({
            label: "DEAD (worker crashed)",
          }),
          // Async runs end where their target reports them: in the API.
          ...["SUCCEEDED", "FAILED", "DEAD"].map((status) =>
            this.metric(METRICS.runOutcome, "api", { status }).with({ label: `${status} (async)` }),
          ),
        ],
        { stacked: true },
      ),
      graph("Dispatcher claims", [
        this.metric(METRICS.claims, "dispatcher").with({ label: "claimed" }),
        this.metric(METRICS.claims, "api").with({ label: "claimed (fast path)" }),
        this.metric(METRICS.claimsLost, "dispatcher").with({ label: "lost to races" }),
        this.metric(METRICS.staleDueEntries, "dispatcher").with({ label: "stale due entries" }),
      ]),
    );
    this.dashboard.addWidgets(
      graph(
        "Queue depth",
        queues.allWork.flatMap((queue, i) => [
          queue
            .metricApproximateNumberOfMessagesVisible({ period: MINUTE, statistic: "Maximum" })
            .with({ label: `${PRIORITIES[i]} visible` }),
          queue
            .metricApproximateNumberOfMessagesNotVisible({ period: MINUTE, statistic: "Maximum" })
            .with({ label: `${PRIORITIES[i]} in flight` }),
          queue
            .metricApproximateNumberOfMessagesDelayed({ period: MINUTE, statistic: "Maximum" })
            .with({ label: `${PRIORITIES[i]} delayed` }),
        ]),
      ),
      graph(
        "Age of oldest message (s)",
        queues.allWork.map((queue, i) =>
          queue
            .metricApproximateAgeOfOldestMessage({ period: MINUTE, statistic: "Maximum" })
            .with({ label: PRIORITIES[i] }),
        ),
      ),
      graph("Dead-letter queues", [
        ...queues.allDeadLetters.map((queue, i) =>
          queue
            .metricApproximateNumberOfMessagesVisible({ period: MINUTE, statistic: "Maximum" })
            .with({ label: `${PRIORITIES[i]} DLQ` }),
        ),
        queues.asyncFailures
          .metricApproximateNumberOfMessagesVisible({ period: MINUTE, statistic: "Maximum" })
          .with({ label: "async invoke failures" }),
      ]),
    );
    this.dashboard.addWidgets(
      new GraphWidget({
        title:
          "Reaper re-sends and shards reached a tick, how far it stands behind and how long a shard went unread (ms, right)",
        left: [
          this.metric(METRICS.reaperResends, "tick").with({ label: "re-sent runs" }),
          // Below the stage's shard count: passes run out of the tick's time and go round in turns.
          this.metric(METRICS.reaperShardsReached, "tick", {}, "Minimum").with({
            label: "shards reached",
          }),
        ],
        right: [
          this.metric(METRICS.reaperBehindMs, "tick", {}, "Maximum").with({ label: "behind" }),
          this.metric(METRICS.reaperLongestUnreadMs, "tick", {}, "Maximum").with({
            label: "longest a shard unread",
          }),
        ],
        width: 8,
        height: 6,
      }),
      graph("Lease takeovers, lost fences, lapsed run leases and starts given back", [
        // One series per shard would need the shard count at deploy time; a search sums them all.
        new MathExpression({
          expression: `SUM(SEARCH('{"${settings.metricsNamespace}",service,shard} MetricName="${METRICS.leaseTakeovers}"', 'Sum', 60))`,
          usingMetrics: {},
          label: "lease takeovers (all shards)",
          period: MINUTE,
        }),
        ...(["dispatcher", "worker"] as const).map((component) =>
          this.metric(METRICS.fenceLost, component, { component }).with({
            label: `fence lost (${component})`,
          }),
        ),
        this.metric(METRICS.leaseLapsed, "worker").with({ label: "run lease lapsed (worker)" }),
        // Rising round after round: a run whose deliveries keep failing on storage, never dead-lettered.
        this.metric(METRICS.startsGivenBack, "worker").with({
          label: "start given back on storage failure (worker)",
        }),
      ]),
      graph(
        "Function errors",
        functions.map(([name, f]) =>
          f.fn.metricErrors({ period: MINUTE, statistic: "Sum" }).with({ label: name }),
        ),
      ),
    );
    this.dashboard.addWidgets(
      graph(
        "Function duration p99 (ms)",
        functions.map(([name, f]) =>
          f.fn.metricDuration({ period: MINUTE, statistic: "p99" }).with({ label: name }),
        ),
      ),
      graph(
        "Concurrent executions",
        functions.map(([name, f]) =>
          f.fn
            .metric("ConcurrentExecutions", { period: MINUTE, statistic: "Maximum" })
            .with({ label: name }),
        ),
      ),
      graph(
        "Throttles",
        functions.map(([name, f]) =>
          f.fn.metricThrottles({ period: MINUTE, statistic: "Sum" }).with({ label: name }),
        ),
      ),
    );
    this.dashboard.addWidgets(graph("DynamoDB throttle events", throttleEvents));
    this.dashboard.addWidgets(
      new AlarmStatusWidget({ title: "Alarms", alarms: this.alarms, width: 24, height: 4 }),
    );
    this.addTenantRules(worker.worker, worker.deadLetterConsumer, api.handler);
  }

  /**
   * Per-tenant visibility from the log lines that name their tenant (TENANT_LOG_EVENTS), as
   * Contributor Insights rules: a flat price per rule plus a little per matched line, where a
   * `tenant` metric dimension would add a custom metric per tenant (docs/architecture.md,
   * "Observability").
   */
  private addTenantRules(
    worker: SchedulerFunction,
    deadLetters: SchedulerFunction,
    api: SchedulerFunction,
  ): void {
    const stack = Stack.of(this);
    const runFinished = { Match: "$.message", In: [TENANT_LOG_EVENTS.runFinished] };
    // A run's ending is logged by the worker, by the DLQ consumer when it ends a run that crashed
    // every worker DEAD, and by the API when an async target completes it.
    const runLogs = [worker.logGroup, deadLetters.logGroup, api.logGroup];
    const rule = (
      id: string,
      logGroups: readonly SchedulerFunction["logGroup"][],
      contribution: Record<string, unknown>,
      aggregateOn: "Count" | "Sum",
    ) => {
      this.tenantRules.push(
        new CfnInsightRule(this, id, {
          ruleName: `${stack.stackName}-${id}`,
          ruleState: "ENABLED",
          ruleBody: stack.toJsonString({
            Schema: { Name: "CloudWatchLogRule", Version: 1 },
            LogGroupNames: logGroups.map((group) => group.logGroupName),
            LogFormat: "JSON",
            Contribution: contribution,
            AggregateOn: aggregateOn,
          }),
        }),
      );
    };
    rule(
      "TenantRuns",
      runLogs,
      { Keys: ["$.tenantId", "$.status"], Filters: [runFinished] },
      "Count",
    );
    rule(
      "TenantLag",
      runLogs,
      { Keys: ["$.tenantId"], ValueOf: "$.lagMs", Filters: [runFinished] },
      "Sum",
    );
    rule(
      "TenantLateStarts",
      runLogs,
      {
        Keys: ["$.tenantId"],
        Filters: [runFinished, { Match: "$.lagMs", GreaterThan: this.settings.lagAlarmMs }],
      },
      "Count",
    );
    rule(
      "TenantThrottles",
      [api.logGroup],
      {
        Keys: ["$.tenantId", "$.code"],
        Filters: [{ Match: "$.message", In: [TENANT_LOG_EVENTS.requestThrottled] }],
      },
      "Count",
    );
  }

  /** An engine metric as Powertools publishes it: namespace, plus the emitter's service dimension. */
  private metric(
    name: MetricName,
    emitter: Component,
    dimensions: Record<string, string> = {},
    statistic = "Sum",
  ): Metric {
    return new Metric({
      namespace: this.settings.metricsNamespace,
      metricName: name,
      dimensionsMap: { service: SERVICE_NAMES[emitter], ...dimensions },
      statistic,
      period: MINUTE,
    });
  }
}
