import { Logger as PowertoolsLogger } from "@aws-lambda-powertools/logger";
import { MetricUnit, Metrics as PowertoolsMetrics } from "@aws-lambda-powertools/metrics";
import { createAwsClients } from "./aws.js";
import { systemClock } from "./clock.js";
import { ENV, type Env, loadSettings, requireEnv } from "./config.js";
import type { Engine } from "./engine.js";
import type { Observability } from "./observability.js";

/** Powertools Logger and Metrics (CloudWatch EMF) behind the engine's small interfaces. */
export function powertoolsObservability(serviceName: string): Observability & {
  logger: PowertoolsLogger;
  metrics: PowertoolsMetrics & Observability["metrics"];
} {
  const logger = new PowertoolsLogger({ serviceName });
  const metrics = new PowertoolsMetrics({
    serviceName,
    namespace: process.env.POWERTOOLS_METRICS_NAMESPACE ?? "Scheduler",
  });
  const adapter = Object.assign(metrics, {
    add(
      name: string,
      value: number,
      unit: "Count" | "Milliseconds",
      dimensions?: Record<string, string>,
    ) {
      if (dimensions && Object.keys(dimensions).length > 0) {
        // Dimensioned points go out as their own EMF blob so they do not leak dimensions onto others.
        const single = metrics.singleMetric();
        for (const [key, val] of Object.entries(dimensions)) single.addDimension(key, val);
        single.addMetric(
          name,
          unit === "Count" ? MetricUnit.Count : MetricUnit.Milliseconds,
          value,
        );
      } else {
        metrics.addMetric(
          name,
          unit === "Count" ? MetricUnit.Count : MetricUnit.Milliseconds,
          value,
        );
      }
    },
  });
  return {
    logger,
    metrics: adapter,
    log: {
      debug: (m, f) => logger.debug(m, f ?? {}),
      info: (m, f) => logger.info(m, f ?? {}),
      warn: (m, f) => logger.warn(m, f ?? {}),
      error: (m, f) => logger.error(m, f ?? {}),
    },
  };
}

/** The engine of a deployed function, from the environment the CDK stack sets. */
export function engineFromEnv(obs: Observability, env: Env = process.env): Engine {
  const { doc, sqs } = createAwsClients();
  return {
    doc,
    sqs,
    tables: {
      jobs: requireEnv(ENV.jobsTable, env),
      runs: requireEnv(ENV.runsTable, env),
      webhookSecrets: requireEnv(ENV.webhookSecretsTable, env),
    },
    queues: {
      high: requireEnv(ENV.queueHigh, env),
      normal: requireEnv(ENV.queueNormal, env),
      low: requireEnv(ENV.queueLow, env),
    },
    settings: loadSettings(env),
    clock: systemClock,
    // Looked up per draw, not captured at cold start, so a test that replaces Math.random steers
    // a deployed handler's backoff jitter too.
    random: () => Math.random(),
    obs,
  };
}
