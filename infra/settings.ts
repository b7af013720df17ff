// The deployment's settings, by concept: their shape and context keys (settings-shape.ts), their
// defaults (settings-resolve.ts) and checks (settings-validation.ts), what the stack derives from
// them (settings-derived.ts), and how CDK context gives them (settings-context.ts).
export { settingsFromContext } from "./settings-context.js";
export {
  apiEnvironment,
  apiFunctionEnvironment,
  dispatcherTimeoutSeconds,
  engineEnvironment,
  workerEventSourceConcurrency,
} from "./settings-derived.js";
export { resolveSettings } from "./settings-resolve.js";
export {
  CONTEXT_KEYS,
  isDevStage,
  MAX_WORKER_CONCURRENCY,
  type SchedulerSettings,
} from "./settings-shape.js";
export { refuseAlarmTopicElsewhere } from "./settings-validation.js";
