import type { OpenAPIV3 } from "openapi-types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { type ApiHarness, expectError, laterJob, startApi } from "./support.js";

/**
 * Each job type's payload schema is checked at create and edit (400 naming
 * payload.<field>, nothing written) and listed in the OpenAPI document; the
 * demo types are refused, naming `type`, where the deployment does not enable
 * them.
 */
const InvoicePayload = z.strictObject({
  invoiceId: z.string().min(1),
  copies: z.number().int().min(1).optional(),
});
const invoiceType = {
  name: "invoice",
  payload: InvoicePayload,
  description: "An invoice, for the tests.",
};

let sandbox: ApiHarness;
let deployed: ApiHarness;
beforeAll(async () => {
  [sandbox, deployed] = await Promise.all([
    startApi({ jobTypes: jobTypeCatalog({ demoTypes: true, custom: [invoiceType] }) }),
    startApi({ jobTypes: jobTypeCatalog({ demoTypes: false, custom: [invoiceType] }) }),
  ]);
});
afterAll(() => Promise.all([sandbox.close(), deployed.close()]));

async function itemCounts(api: ApiHarness) {
  const [jobs, due, runs] = await Promise.all([
    api.fixture.jobs(),
    api.fixture.dueEntries(),
    api.fixture.runs(),
  ]);
  return { jobs: jobs.length, due: due.length, runs: runs.length };
}

const REFUSED: readonly [string, unknown, string, RegExp][] = [
  ["sleep", { ms: "soon" }, "payload.ms", /expected number/],
  ["sleep", { ms: -1 }, "payload.ms", />=0/],
  ["sleep", { ms: 1, msec: 1 }, "payload.msec", /unknown field "msec"/],
  ["sleep", [100], "payload", /expected object/],
  ["fail", { times: 1.5 }, "payload.times", /expected int/],
  [
    "fail",
    { times: 10_000 },
    "payload.times",
    /^payload\.times: Too big: expected number to be <=9999$/,
  ],
  ["fail", { times: 2, retryable: "no" }, "payload.retryable", /expected boolean/],
  ["invoice", { copies: 2 }, "payload.invoiceId", /expected string/],
  ["invoice", null, "payload", /expected object/],
];

describe("payloads checked against their type's schema", () => {
  it.each(REFUSED)(
    "create %s with %j: 400 naming %s, nothing written",
    async (type, payload, field, message) => {
      const before = await itemCounts(sandbox);
      const reply = await sandbox.call("POST", "/jobs", { body: laterJob({ type, payload }) });
      const error = expectError(reply, 400, { code: "validation_failed", field });
      expect(error.message).toMatch(message);
      expect(await itemCounts(sandbox)).toEqual(before);
    },
  );

  it("accepts payloads that fit, and no payload where every field has a default", async () => {
    for (const [type, payload] of [
      ["sleep", { ms: 250 }],
      ["sleep", undefined],
      ["fail", { times: 1, retryable: false }],
      ["fail", { times: 9999 }],
      ["invoice", { invoiceId: "inv-1", copies: 2 }],
      ["noop", { anything: ["goes", 1, null] }],
    ] as const) {
      const reply = await sandbox.call("POST", "/jobs", {
        body: laterJob({ type, ...(payload === undefined ? {} : { payload }) }),
      });
      expect(reply.status, `${type} ${reply.text}`).toBe(201);
    }
  });

  it("checks an edit's payload against the job's type, and leaves the job as it was", async () => {
    const created = await sandbox.call("POST", "/jobs", {
      body: laterJob({ type: "sleep", payload: { ms: 100 } }),
    });
    expect(created.status, created.text).toBe(201);
    const id = (created.body as { id: string }).id;
    const edit = await sandbox.call("PATCH", `/jobs/${id}`, {
      body: { payload: { ms: "later" }, name: "renamed" },
      headers: { "If-Match": '"1"' },
    });
    expectError(edit, 400, { code: "validation_failed", field: "payload.ms" });
    const after = await sandbox.call("GET", `/jobs/${id}`);
    expect(after.body).toMatchObject({ version: 1, name: "sleep", payload: { ms: 100 } });
    const fixed = await sandbox.call("PATCH", `/jobs/${id}`, {
      body: { payload: { ms: 5 } },
      headers: { "If-Match": '"1"' },
    });
    expect(fixed.status, fixed.text).toBe(200);
    expect(fixed.body).toMatchObject({ version: 2, payload: { ms: 5 } });
  });
});

describe("demo types", () => {
  it.each(["sleep", "fail"])(
    "%s is refused with a 400 naming type where not enabled, and nothing is written",
    async (type) => {
      const before = await itemCounts(deployed);
      const reply = await deployed.call("POST", "/jobs", { body: laterJob({ type }) });
      const error = expectError(reply, 400, { code: "validation_failed", field: "type" });
      expect(error.message).toMatch(
        new RegExp(`"${type}" is a demo type, not enabled on this deployment`),
      );
      expect(await itemCounts(deployed)).toEqual(before);
    },
  );

  it("leaves the other types as they are where demo types are not enabled", async () => {
    const reply = await deployed.call("POST", "/jobs", { body: laterJob({ type: "noop" }) });
    expect(reply.status, reply.text).toBe(201);
    const unknown = await deployed.call("POST", "/jobs", { body: laterJob({ type: "sleeep" }) });
    expect(expectError(unknown, 400, { field: "type" }).message).toMatch(/Invalid option/);
  });
});

describe("the OpenAPI document", () => {
  async function documentOf(api: ApiHarness) {
    const reply = await api.call("GET", "/openapi.json", { key: null });
    return reply.body as OpenAPIV3.Document;
  }
  const schemaOf = (doc: OpenAPIV3.Document, name: string) =>
    doc.components?.schemas?.[name] as OpenAPIV3.SchemaObject;

  it("lists each accepted type's payload schema under JobPayloads, the built-ins as components", async () => {
    const doc = await documentOf(sandbox);
    const payloads = schemaOf(doc, "JobPayloads");
    expect(Object.keys(payloads.properties ?? {})).toEqual([
      "http",
      "noop",
      "sleep",
      "fail",
      "invoice",
    ]);
    expect(payloads.required).toEqual(["http", "noop", "sleep", "fail", "invoice"]);
    expect(payloads.properties?.sleep).toEqual({ $ref: "#/components/schemas/SleepPayload" });
    expect(payloads.properties?.fail).toEqual({ $ref: "#/components/schemas/FailPayload" });
    expect(schemaOf(doc, "SleepPayload")).toMatchObject({
      type: "object",
      nullable: true,
      additionalProperties: false,
      properties: { ms: { type: "integer", minimum: 0 } },
    });
    expect(schemaOf(doc, "FailPayload").properties).toMatchObject({
      times: { type: "integer", minimum: 0, maximum: 9999 },
      retryable: { type: "boolean" },
    });
    expect(payloads.properties?.invoice).toMatchObject({
      type: "object",
      required: ["invoiceId"],
      properties: { invoiceId: { type: "string" } },
    });
  });

  it("lists neither demo type where they are not enabled", async () => {
    const doc = await documentOf(deployed);
    const type = schemaOf(doc, "CreateJobRequest").properties?.type as OpenAPIV3.SchemaObject;
    expect(type.enum).toEqual(["http", "noop", "invoice"]);
    expect(Object.keys(schemaOf(doc, "JobPayloads").properties ?? {})).toEqual([
      "http",
      "noop",
      "invoice",
    ]);
  });
});
