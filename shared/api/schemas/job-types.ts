/** The job `type` and the payload schemas of the deployment's job types, for validation and the document. */
import { z } from "@hono/zod-openapi";
import type { JobTypeCatalog } from "../../job-types/registry.js";

/**
 * `type`: an enum of the accepted types, so the document lists them. A demo
 * type this deployment does not enable is refused saying so.
 */
export function jobTypeSchema(catalog: JobTypeCatalog) {
  return z
    .enum(catalog.accepted, {
      error: (issue) =>
        typeof issue.input === "string"
          ? (catalog.demoRefusal(issue.input) ?? undefined)
          : undefined,
    })
    .openapi({
      description:
        "A built-in or registered job type; its payload must fit the type's schema (JobPayloads).",
    });
}

/**
 * Each accepted type's payload schema, by type name: the document's view of
 * the JobPayloads interface handlers are typed by. Types with a schema of
 * their own appear as components (SleepPayload, …).
 */
export function jobPayloadsSchema(catalog: JobTypeCatalog) {
  const shape: Record<string, z.ZodType> = {};
  for (const name of catalog.accepted)
    shape[name] = catalog.definition(name)?.payload ?? z.unknown();
  return z.object(shape).openapi("JobPayloads", {
    // Every accepted type is listed (zod leaves out the types whose payload may be absent).
    required: [...catalog.accepted],
    description:
      "The payload each job type accepts, by type. A create or edit whose payload does not fit its type's schema is refused with a 400 naming payload.<field>, and nothing is written.",
  });
}
