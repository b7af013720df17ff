import type { z } from "zod";
import type { FieldIssue } from "../validation.js";
import {
  type FailPayload,
  FailPayloadSchema,
  HttpPayloadSchema,
  NoopPayloadSchema,
  type SleepPayload,
  SleepPayloadSchema,
} from "./built-in.js";

/**
 * Each job type's payload, by type name (graphile-worker's `GraphileWorker.Tasks`).
 * Declaration-mergeable: a deployment's own types add theirs with
 *
 *   declare module "<path to>/shared/job-types/registry.js" {
 *     interface JobPayloads { "send-report": { reportId: string } }
 *   }
 *
 * and their handler's `ctx.payload` is typed; a type not named here gets `unknown`.
 * @public
 */
export interface JobPayloads {
  http: unknown;
  noop: unknown;
  sleep: SleepPayload;
  fail: FailPayload;
}

/** The payload a handler of `T` is given: declared in JobPayloads, else unknown. */
export type PayloadOf<T extends string> = T extends keyof JobPayloads ? JobPayloads[T] : unknown;

/** What a job type declares: the API validates payloads with it, the worker parses them. */
export interface JobTypeDefinition<T extends string = string> {
  readonly name: T;
  /** Checked at create and edit (400 naming payload.<field>) and again before the handler runs. */
  readonly payload: z.ZodType<PayloadOf<T>>;
  /** One line for the API document. */
  readonly description: string;
  /** A demo or test type: a deployed stack accepts it only when demo types are enabled. */
  readonly demo?: boolean;
}

/** A definition whose schema must produce the payload declared for its name in JobPayloads. */
function defineJobType<T extends string>(definition: JobTypeDefinition<T>): JobTypeDefinition<T> {
  return definition;
}

export const BUILT_IN_JOB_TYPES = {
  http: defineJobType({
    name: "http",
    payload: HttpPayloadSchema,
    description: "POSTs the payload to target.url, signed (Standard Webhooks).",
  }),
  noop: defineJobType({
    name: "noop",
    payload: NoopPayloadSchema,
    description: "Does nothing and succeeds.",
  }),
  sleep: defineJobType({
    name: "sleep",
    payload: SleepPayloadSchema,
    description: "Sleeps payload.ms milliseconds, then succeeds.",
    demo: true,
  }),
  fail: defineJobType({
    name: "fail",
    payload: FailPayloadSchema,
    description: "Fails the first payload.times attempts of each occurrence, then succeeds.",
    demo: true,
  }),
} as const;

const builtInDefinitions: readonly JobTypeDefinition[] = Object.values(BUILT_IN_JOB_TYPES);
export const BUILT_IN_TYPES: readonly string[] = builtInDefinitions.map((t) => t.name);

/** The job types one deployment accepts, each with its payload schema. */
export interface JobTypeCatalog {
  /** The types a create may name: the built-ins (demo types only when enabled), then custom ones. */
  readonly accepted: readonly [string, ...string[]];
  /** The definition of an accepted type. */
  definition(type: string): JobTypeDefinition | undefined;
  /** Why a create naming `type` is refused when it is a demo type this deployment does not enable, else null. */
  demoRefusal(type: string): string | null;
  /** The payload checked against its type's schema (any known type's); each issue names payload.<field>. */
  payloadIssues(type: string, payload: unknown): FieldIssue[];
}

interface CatalogOptions {
  /** The deployment's own types (functions/worker/handlers), after the built-ins. */
  readonly custom?: readonly JobTypeDefinition[];
  /** Accept the demo types (`sleep`, `fail`): the sandbox and tests do, a deployed stack only when enabled. */
  readonly demoTypes: boolean;
}

export function jobTypeCatalog(options: CatalogOptions): JobTypeCatalog {
  const all = new Map<string, JobTypeDefinition>();
  for (const definition of [...builtInDefinitions, ...(options.custom ?? [])]) {
    if (all.has(definition.name)) throw new Error(`job type "${definition.name}" is defined twice`);
    all.set(definition.name, definition);
  }
  const isAccepted = (definition: JobTypeDefinition) => options.demoTypes || !definition.demo;
  const [first, ...rest] = [...all.values()].filter(isAccepted).map((d) => d.name);
  if (first === undefined) throw new Error("no job types accepted");
  const accepted: readonly [string, ...string[]] = [first, ...rest];
  const definition = (type: string) => {
    const found = all.get(type);
    return found && isAccepted(found) ? found : undefined;
  };
  return {
    accepted,
    definition,
    demoRefusal(type) {
      const found = all.get(type);
      if (!found?.demo || isAccepted(found)) return null;
      return `"${type}" is a demo type, not enabled on this deployment (the demoJobTypes stack option); accepted: ${accepted.join(", ")}`;
    },
    payloadIssues(type, payload) {
      // Also a demo type's: a job made while they were enabled may still be edited.
      const schema = all.get(type)?.payload;
      if (!schema) return [];
      const result = schema.safeParse(payload);
      return result.success ? [] : fieldIssuesOf(result.error.issues, "payload");
    },
  };
}

/** Zod issues as fields under `base`: `payload.ms`, or `payload` for the payload as a whole. */
export function fieldIssuesOf(issues: readonly z.core.$ZodIssue[], base: string): FieldIssue[] {
  return issues.flatMap((issue) => {
    const field = [base, ...issue.path.map(String)].join(".");
    if (issue.code === "unrecognized_keys") {
      return issue.keys.map((key) => ({
        field: `${field}.${key}`,
        message: `unknown field "${key}"`,
      }));
    }
    return [{ field, message: issue.message }];
  });
}
