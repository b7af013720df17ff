import type { OpenAPIV3 } from "openapi-types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { type ApiHarness, expectError, inMinutes, type Reply, startApi } from "./support.js";

/**
 * Every integer field the OpenAPI document bounds with a maximum (request bodies, query
 * parameters, a job type's payload), sent far past its bounds: a 400 naming the field and its
 * own bound, as the document states it, and no other issue for that field. zod's int() also
 * checks the safe-integer range, so a value such as 1e308 named 9007199254740991 instead.
 */
let api: ApiHarness;
let document: OpenAPIV3.Document;
let jobId: string;

beforeAll(async () => {
  api = await startApi();
  const reply = await api.call("GET", "/openapi.json", { key: null });
  expect(reply.status).toBe(200);
  document = reply.body as OpenAPIV3.Document;
  // Every request below is one of a hundred or so: lifted past the default rate.
  const lifted = await api.call("PUT", "/tenants/tenant-a/quotas", {
    body: { requestsPerSecond: 1_000_000 },
  });
  expect(lifted.status, lifted.text).toBe(200);
  const created = await api.call("POST", "/jobs", {
    body: { type: "noop", schedule: { cron: "0 0 1 1 *", timezone: "UTC" } },
  });
  expect(created.status, created.text).toBe(201);
  jobId = JobSchema.parse(created.body).id;
});
afterAll(() => api.close());

type Schema = OpenAPIV3.SchemaObject | OpenAPIV3.ReferenceObject;

/** An integer field: where it sits in a request, and which component declares it. */
interface Integer {
  readonly at: readonly string[];
  readonly owner: string;
  readonly minimum: number | undefined;
  readonly maximum: number | undefined;
}

/** An integer field with a maximum. */
interface Bounded extends Integer {
  readonly maximum: number;
}

const REF = "#/components/schemas/";

function integers(
  schema: Schema,
  at: readonly string[],
  owner: readonly string[],
  seen: ReadonlySet<string> = new Set(),
): Integer[] {
  if ("$ref" in schema) {
    const name = schema.$ref.slice(REF.length);
    const target = document.components?.schemas?.[name];
    if (target === undefined) throw new Error(`no component ${schema.$ref}`);
    return seen.has(name) ? [] : integers(target, at, [name], new Set([...seen, name]));
  }
  const found: Integer[] = [];
  if (schema.type === "integer")
    found.push({
      at,
      owner: owner.join("."),
      minimum: schema.minimum,
      maximum: schema.maximum,
    });
  for (const [name, property] of Object.entries(schema.properties ?? {}))
    found.push(...integers(property, [...at, name], [...owner, name], seen));
  if ("items" in schema) found.push(...integers(schema.items, [...at, "0"], [...owner, "0"], seen));
  for (const option of [...(schema.anyOf ?? []), ...(schema.oneOf ?? []), ...(schema.allOf ?? [])])
    found.push(...integers(option, at, owner, seen));
  return found;
}

const boundedIntegers = (...args: Parameters<typeof integers>): Bounded[] =>
  integers(...args).flatMap((field) =>
    field.maximum === undefined ? [] : [{ ...field, maximum: field.maximum }],
  );

/** `base` with `value` at `at`, the objects on the way made where missing. */
function withValueAt(base: unknown, at: readonly string[], value: number): unknown {
  const [head, ...rest] = at;
  if (head === undefined) return value;
  if (Array.isArray(base)) {
    const copy: unknown[] = [...base];
    copy[Number(head)] = withValueAt(copy[Number(head)], rest, value);
    return copy;
  }
  const object = typeof base === "object" && base !== null ? base : {};
  return { ...object, [head]: withValueAt((object as Record<string, unknown>)[head], rest, value) };
}

const HTTP_TARGET = { url: "https://example.com/hook" };
const CRON = { cron: "0 0 1 1 *", timezone: "UTC" };
/** A body each operation with a bounded integer accepts, its nested objects valid around the field. */
const BASES: Record<string, unknown> = {
  "POST /jobs": { type: "http", schedule: CRON, target: HTTP_TARGET },
  "POST /jobs:batch": { jobs: [{ type: "http", schedule: CRON, target: HTTP_TARGET }] },
  "PATCH /jobs/{id}": { target: HTTP_TARGET },
  "POST /schedules/preview": { schedule: CRON },
  "PUT /tenants/{tenantId}/quotas": {},
  "POST /runs/{runId}/complete": { status: "failed" },
};

/** 1e308 and 2^53 past the maximum (2^53 is the first integer past the safe range), -1e308 below the minimum. */
const FAR = [1e308, 2 ** 53, -1e308] as const;

/** FAR's values above the maximum as a query writes them: in decimal digits. */
const QUERY_FAR: readonly (readonly [number, string])[] = [
  [1e308, `1${"0".repeat(308)}`],
  [2 ** 53, "9007199254740992"],
];

function expectedMessage(field: Bounded, value: number): string {
  return value > 0
    ? `Too big: expected number to be <=${field.maximum}`
    : `Too small: expected number to be >=${field.minimum}`;
}

/** The 400 names `field` with exactly `message`: first, and its only issue for that field. */
function expectNamed(reply: Reply, field: string, message: string, what: string): void {
  const error = expectError(reply, 400, { code: "validation_failed" });
  expect(error.message, what).toBe(`${field}: ${message}`);
  expect(error.field, what).toBe(field);
  expect(
    error.issues?.filter((issue) => issue.field === field),
    what,
  ).toEqual([{ field, message }]);
}

const METHODS = ["get", "post", "patch", "put", "delete"] as const;

function operations() {
  return Object.entries(document.paths).flatMap(([path, item]) =>
    METHODS.flatMap((method) => {
      const operation = item?.[method];
      return operation ? [{ path, method: method.toUpperCase(), operation }] : [];
    }),
  );
}

const concrete = (path: string) =>
  path.replace("{id}", jobId).replace("{tenantId}", "tenant-b").replace("{runId}", "no-such-run");

describe("an integer field far past its bounds", () => {
  it("is a 400 naming the field and its own bound, in every request body and payload", async () => {
    const reached = new Set<string>();
    for (const { path, method, operation } of operations()) {
      const body = operation.requestBody as OpenAPIV3.RequestBodyObject | undefined;
      const schema = body?.content["application/json"]?.schema;
      if (schema === undefined) continue;
      const fields = boundedIntegers(schema, [], []);
      if (fields.length === 0) continue;
      const base = BASES[`${method} ${path}`];
      if (base === undefined) throw new Error(`no accepted body for ${method} ${path}`);
      for (const field of fields) {
        reached.add(field.owner);
        for (const value of FAR) {
          const what = `${method} ${path} ${field.at.join(".")} = ${value}`;
          const reply = await api.call(method, concrete(path), {
            body: withValueAt(base, field.at, value),
            headers: method === "PATCH" ? { "If-Match": '"1"' } : {},
          });
          const message = expectedMessage(field, value);
          if (path !== "/jobs:batch") {
            expectNamed(reply, field.at.join("."), message, what);
            continue;
          }
          // Each job of a batch is answered on its own, its error naming the job's own field.
          expect(reply.status, reply.text).toBe(200);
          const [result] = (reply.body as { results: { status: number; error: unknown }[] })
            .results;
          const own = field.at.slice(2).join(".");
          expect(result?.status, what).toBe(400);
          expect(result?.error, what).toEqual({
            code: "validation_failed",
            message: `${own}: ${message}`,
            field: own,
            issues: [{ field: own, message }],
          });
        }
      }
    }

    // A job type's payload: each type's schema in JobPayloads, sent with a create of that type.
    const payloads = document.components?.schemas?.JobPayloads as OpenAPIV3.SchemaObject;
    for (const [type, schema] of Object.entries(payloads.properties ?? {})) {
      for (const field of boundedIntegers(schema, ["payload"], [])) {
        reached.add(field.owner);
        for (const value of FAR) {
          const reply = await api.call("POST", "/jobs", {
            body: withValueAt({ type, schedule: CRON }, field.at, value),
          });
          expectNamed(
            reply,
            field.at.join("."),
            expectedMessage(field, value),
            `${type} ${field.at.join(".")} = ${value}`,
          );
        }
      }
    }

    // Every bounded integer the document declares was sent; Quotas is only ever answered.
    const declared = new Set(
      Object.entries(document.components?.schemas ?? {}).flatMap(([name, schema]) =>
        boundedIntegers(schema, [], [name], new Set([name])).map((field) => field.owner),
      ),
    );
    expect([...declared].filter((owner) => !reached.has(owner)).sort()).toEqual([
      "Quotas.activeJobs",
      "Quotas.concurrentRuns",
      "Quotas.requestsPerSecond",
      "Quotas.runsPerMinute",
    ]);
    expect(reached.size).toBeGreaterThanOrEqual(15);
  });

  it("is a 400 naming the parameter and its own bound, in every query parameter", async () => {
    const named: string[] = [];
    for (const { path, method, operation } of operations()) {
      for (const raw of operation.parameters ?? []) {
        const parameter = raw as OpenAPIV3.ParameterObject;
        if (parameter.in !== "query" || parameter.schema === undefined) continue;
        for (const field of boundedIntegers(parameter.schema, [parameter.name], [])) {
          named.push(`${method} ${path} ${parameter.name}`);
          // A query parameter is written in decimal digits (a sign or an exponent is refused as
          // such): 10^308 and 2^53 written out in full, each far past the maximum.
          for (const [value, digits] of QUERY_FAR) {
            const query = `${parameter.name}=${digits}`;
            const reply = await api.call(method, `${concrete(path)}?${query}`);
            expectNamed(
              reply,
              parameter.name,
              expectedMessage(field, value),
              `${method} ${path}?${query}`,
            );
          }
        }
      }
    }
    expect(named.sort()).toEqual([
      "GET /dead-letters limit",
      "GET /jobs limit",
      "GET /jobs/{id}/preview count",
      "GET /jobs/{id}/runs limit",
    ]);
  });

  it("is one the document bounds: every integer a request body, a job payload or a query parameter takes has a maximum", () => {
    const unbounded = (schema: Schema, at: readonly string[], where: string) =>
      integers(schema, at, []).flatMap((field) =>
        field.maximum === undefined ? [`${where} ${field.at.join(".")}`] : [],
      );
    const found: string[] = [];
    for (const { path, method, operation } of operations()) {
      const body = operation.requestBody as OpenAPIV3.RequestBodyObject | undefined;
      const schema = body?.content["application/json"]?.schema;
      if (schema !== undefined) found.push(...unbounded(schema, [], `${method} ${path}`));
      for (const raw of operation.parameters ?? []) {
        const parameter = raw as OpenAPIV3.ParameterObject;
        if (parameter.schema !== undefined)
          found.push(...unbounded(parameter.schema, [parameter.name], `${method} ${path}`));
      }
    }
    const payloads = document.components?.schemas?.JobPayloads as OpenAPIV3.SchemaObject;
    for (const [type, schema] of Object.entries(payloads.properties ?? {}))
      found.push(...unbounded(schema, ["payload"], type));
    expect(found).toEqual([]);
  });

  it("within its bounds is accepted, at both ends", async () => {
    const at = (value: number) =>
      api.call("POST", "/jobs", {
        body: { type: "noop", schedule: { runAt: inMinutes(60) }, retry: { maxAttempts: value } },
      });
    expect((await at(1)).status).toBe(201);
    expect((await at(100)).status).toBe(201);
    expectNamed(await at(101), "retry.maxAttempts", "Too big: expected number to be <=100", "101");
    expectNamed(
      await at(1.5),
      "retry.maxAttempts",
      "Invalid input: expected int, received number",
      "1.5",
    );
  });
});
