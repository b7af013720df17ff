import { describe, expect, expectTypeOf, it } from "vitest";
import { z } from "zod";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import {
  handlerRegistry,
  isRetryable,
  type JobContext,
  JobError,
  type JobHandler,
  jobType,
} from "../../shared/execution/job-contract.js";
import type { FailPayload, SleepPayload } from "../../shared/job-types/built-in.js";
import { demoJobTypesFrom } from "../../shared/job-types/demo-types.js";
import { BUILT_IN_TYPES, jobTypeCatalog, type PayloadOf } from "../../shared/job-types/registry.js";

const ReportPayload = z.strictObject({ reportId: z.string(), copies: z.number().int().optional() });

// A deployment's own type, declared the way functions/worker/handlers/index.ts describes.
declare module "../../shared/job-types/registry.js" {
  interface JobPayloads {
    "typed-test-report": z.infer<typeof ReportPayload>;
  }
}

const reportDefinition = {
  name: "typed-test-report",
  payload: ReportPayload,
  description: "A report, for the tests.",
} as const;

function contextOf(type: string, payload: unknown): JobContext {
  return {
    jobId: "job",
    tenantId: "tenant",
    runId: "run",
    type,
    scheduledFor: "2030-01-01T00:00:00.000Z",
    attempt: 1,
    idempotencyKey: "job@2030-01-01T00:00:00.000Z",
    payload,
    target: undefined,
    signal: new AbortController().signal,
    fence: 1,
  };
}

describe("job types: payloads typed in the handler", () => {
  it("gives each built-in handler its type's payload, and an undeclared type unknown", () => {
    expectTypeOf<JobContext<"sleep">["payload"]>().toEqualTypeOf<SleepPayload>();
    expectTypeOf<SleepPayload>().toEqualTypeOf<{ ms?: number | undefined } | null>();
    expectTypeOf<JobContext<"fail">["payload"]>().toEqualTypeOf<FailPayload>();
    expectTypeOf<JobContext<"http">["payload"]>().toBeUnknown();
    expectTypeOf<JobContext["payload"]>().toBeUnknown();
    expectTypeOf<PayloadOf<"not-declared">>().toBeUnknown();
  });

  it("types a declared custom type's payload in its handler, as its schema parses it", async () => {
    const seen: string[] = [];
    const registered = jobType(reportDefinition, async (ctx) => {
      expectTypeOf(ctx.payload).toEqualTypeOf<{ reportId: string; copies?: number | undefined }>();
      expectTypeOf(ctx.type).toEqualTypeOf<"typed-test-report">();
      seen.push(ctx.payload.reportId);
    });
    const handler = handlerRegistry([registered]).get("typed-test-report");
    expectTypeOf(handler).toEqualTypeOf<JobHandler | undefined>();
    await handler?.(contextOf("typed-test-report", { reportId: "r-1" }));
    expect(seen).toEqual(["r-1"]);
  });

  it("refuses, at compile time, a schema that does not produce the declared payload", () => {
    const definition = {
      name: "typed-test-report",
      // @ts-expect-error: reportId is declared a string in JobPayloads
      payload: z.strictObject({ reportId: z.number() }),
      description: "wrong",
    } satisfies Parameters<typeof jobType<"typed-test-report">>[0];
    expect(definition.name).toBe("typed-test-report");
  });

  it("fails a run whose stored payload does not fit its schema, naming the field, without a retry", async () => {
    const handler = builtInHandlers(
      { allowPrivateTargets: true, signingSecrets: async () => [] },
      () => new Date(),
    ).get("sleep");
    const outcome = await handler?.(contextOf("sleep", { ms: "soon" })).then(
      () => null,
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(JobError);
    expect(isRetryable(outcome)).toBe(false);
    expect(String(outcome)).toMatch(/payload\.ms: .*expected number/);
  });

  it("runs the built-ins with their payloads parsed: no payload (null) takes the defaults", async () => {
    const handlers = builtInHandlers(
      { allowPrivateTargets: true, signingSecrets: async () => [] },
      () => new Date(),
    );
    expect(await handlers.get("sleep")?.(contextOf("sleep", null))).toEqual({ sleptMs: 0 });
    expect(await handlers.get("sleep")?.(contextOf("sleep", { ms: 5 }))).toEqual({ sleptMs: 5 });
    const fail = handlers.get("fail")?.(contextOf("fail", { times: 1, retryable: false }));
    await expect(fail).rejects.toMatchObject({ retryable: false });
    expect(await handlers.get("fail")?.(contextOf("fail", { times: 0 }))).toEqual({
      succeededOnAttempt: 1,
    });
  });

  it("`fail` says which planned failure an attempt is, and without `times` that every attempt fails", async () => {
    const fail = builtInHandlers(
      { allowPrivateTargets: true, signingSecrets: async () => [] },
      () => new Date(),
    ).get("fail");
    const messageOf = (payload: unknown, attempt: number) =>
      fail?.({ ...contextOf("fail", payload), attempt }).then(
        () => "succeeded",
        (error: unknown) => (error instanceof JobError ? error.message : String(error)),
      );
    expect(await messageOf({ times: 3 }, 2)).toBe("fail: attempt 2 of 3 planned failures");
    expect(await messageOf(null, 7)).toBe(
      "fail: attempt 7 (every attempt fails: no payload.times)",
    );
    expect(await messageOf({ retryable: false }, 1)).toBe(
      "fail: attempt 1 (every attempt fails: no payload.times)",
    );
  });
});

describe("job type catalog", () => {
  it("accepts the demo types only when enabled, and says why it refuses them", () => {
    const deployed = jobTypeCatalog({ demoTypes: false });
    expect(deployed.accepted).toEqual(["http", "noop"]);
    expect(deployed.demoRefusal("sleep")).toMatch(/"sleep" is a demo type, not enabled/);
    expect(deployed.demoRefusal("nope")).toBeNull();
    expect(deployed.demoRefusal("noop")).toBeNull();
    const sandbox = jobTypeCatalog({ demoTypes: true, custom: [reportDefinition] });
    expect(sandbox.accepted).toEqual([...BUILT_IN_TYPES, "typed-test-report"]);
    expect(sandbox.demoRefusal("fail")).toBeNull();
  });

  it("names payload.<field> for each built-in type with a schema", () => {
    const catalog = jobTypeCatalog({ demoTypes: true, custom: [reportDefinition] });
    expect(catalog.payloadIssues("sleep", { ms: -1 })).toEqual([
      { field: "payload.ms", message: expect.stringMatching(/>=0/) },
    ]);
    expect(catalog.payloadIssues("sleep", { msec: 10 })).toEqual([
      { field: "payload.msec", message: 'unknown field "msec"' },
    ]);
    expect(catalog.payloadIssues("fail", { times: 1.5, retryable: "no" })).toEqual([
      { field: "payload.times", message: expect.stringMatching(/expected int/) },
      { field: "payload.retryable", message: expect.stringMatching(/expected boolean/) },
    ]);
    expect(catalog.payloadIssues("fail", 7)[0]?.field).toBe("payload");
    expect(catalog.payloadIssues("typed-test-report", { copies: 2 })).toEqual([
      { field: "payload.reportId", message: expect.stringMatching(/expected string/) },
    ]);
    for (const ok of [null, {}, { ms: 0 }]) expect(catalog.payloadIssues("sleep", ok)).toEqual([]);
    expect(catalog.payloadIssues("http", { any: ["json", 1] })).toEqual([]);
    expect(catalog.payloadIssues("noop", "anything")).toEqual([]);
  });

  it("refuses a type defined twice", () => {
    expect(() =>
      jobTypeCatalog({ demoTypes: true, custom: [{ ...reportDefinition, name: "noop" }] }),
    ).toThrow(/"noop" is defined twice/);
  });

  it("reads DEMO_JOB_TYPES as true or false, else the fallback", () => {
    expect(demoJobTypesFrom({}, false)).toBe(false);
    expect(demoJobTypesFrom({ DEMO_JOB_TYPES: "true" }, false)).toBe(true);
    expect(demoJobTypesFrom({ DEMO_JOB_TYPES: "false" }, true)).toBe(false);
    expect(() => demoJobTypesFrom({ DEMO_JOB_TYPES: "yes" }, true)).toThrow(/"true" or "false"/);
  });
});
