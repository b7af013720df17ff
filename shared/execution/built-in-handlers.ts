import { sleep } from "../clock.js";
import { BUILT_IN_JOB_TYPES } from "../job-types/registry.js";
import {
  handlerRegistry,
  JobError,
  type JobHandler,
  jobType,
  type RegisteredJobType,
} from "./job-contract.js";
import { type WebhookSettings, webhookHandler } from "./webhook-handler.js";

const sleepHandler: JobHandler<"sleep"> = async (ctx) => {
  const ms = ctx.payload?.ms ?? 0;
  await sleep(ms, ctx.signal);
  if (ctx.signal.aborted)
    throw new JobError(`sleep interrupted: ${String(ctx.signal.reason)}`, { retryable: true });
  return { sleptMs: ms };
};

/** Fails the first `times` attempts of each occurrence, then succeeds; a test and demo type. */
const failHandler: JobHandler<"fail"> = async (ctx) => {
  const times = ctx.payload?.times;
  const retryable = ctx.payload?.retryable !== false;
  if (times === undefined)
    throw new JobError(`fail: attempt ${ctx.attempt} (every attempt fails: no payload.times)`, {
      retryable,
    });
  if (ctx.attempt <= times) {
    throw new JobError(`fail: attempt ${ctx.attempt} of ${times} planned failures`, { retryable });
  }
  return { succeededOnAttempt: ctx.attempt };
};

/** The built-in types with their handlers; `http` delivers with these settings. */
export function builtInJobTypes(webhook: WebhookSettings, now: () => Date): RegisteredJobType[] {
  const types = BUILT_IN_JOB_TYPES;
  return [
    jobType(types.http, webhookHandler(webhook, now)),
    jobType(types.noop, async () => undefined),
    jobType(types.sleep, sleepHandler),
    jobType(types.fail, failHandler),
  ];
}

/** The built-in handlers by type name. */
export function builtInHandlers(
  webhook: WebhookSettings,
  now: () => Date,
): Map<string, JobHandler> {
  return handlerRegistry(builtInJobTypes(webhook, now));
}
