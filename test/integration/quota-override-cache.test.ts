import type { GetCommandInput, GetCommandOutput } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_QUOTAS } from "../../shared/config.js";
import type { Engine } from "../../shared/engine.js";
import { cachedQuotaOverride } from "../../shared/quotas/override-cache.js";
import { setQuotaOverride } from "../../shared/quotas/overrides.js";
import { quotaPk, writeQuotaOverride } from "../../shared/storage/tenant-quotas.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { createTestClients, type TestClients } from "../support/namespace.js";

/**
 * How stale a process's cached override can be (docs/api.md "Quotas": each API and worker process
 * keeps a tenant's override for 10 s; the process that set it applies it at once). Each engine
 * object is a process: the cache is kept per engine.
 */
describe("the override cache", () => {
  let f: EngineFixture;
  let clients: TestClients;
  beforeAll(async () => {
    f = await createEngineFixture({ settings: { quotas: DEFAULT_QUOTAS, quotaCacheMs: 10_000 } });
    clients = createTestClients();
  });
  afterAll(async () => {
    clients.destroy();
    await f.destroy();
  });

  it("shows another process's change once the 10 s since its own read are up, not before", async () => {
    const tenant = "cache-other-process";
    const process = { ...f.engine };
    let elapsed = 0;
    const clock = () => elapsed;
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 5 }, new Date());
    expect(await cachedQuotaOverride(process, tenant, clock)).toEqual({ activeJobs: 5 });
    await setQuotaOverride(f.engine, tenant, { activeJobs: 2 });
    elapsed = 9_999;
    expect(await cachedQuotaOverride(process, tenant, clock)).toEqual({ activeJobs: 5 });
    elapsed = 10_000;
    expect(await cachedQuotaOverride(process, tenant, clock)).toEqual({ activeJobs: 2 });
  });

  it("applies a change in the process that set it at once, though an eventually consistent read still answers the override before it", async () => {
    const tenant = "cache-same-process";
    await writeQuotaOverride(f.engine, tenant, { activeJobs: 5 }, new Date());
    // DynamoDB's eventually consistent read just after a write may answer the item before it;
    // DynamoDB Local's reads are all consistent, so that answer is made here.
    const name = "answerOverrideBeforeWrite";
    clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as GetCommandInput;
        const limits = input.Key?.pk === quotaPk(tenant) && input.Key.sk === "LIMITS";
        if (context.commandName !== "GetItemCommand" || !limits || input.ConsistentRead === true)
          return next(args);
        const output: GetCommandOutput = {
          $metadata: {},
          Item: { pk: quotaPk(tenant), sk: "LIMITS", tenantId: tenant, activeJobs: 5 },
        };
        return { output, response: {} } as Awaited<ReturnType<typeof next>>;
      },
      { step: "initialize", name },
    );
    const process: Engine = { ...f.engine, doc: clients.doc };
    let elapsed = 0;
    const clock = () => elapsed;
    expect(await cachedQuotaOverride(process, tenant, clock)).toEqual({ activeJobs: 5 });
    await setQuotaOverride(process, tenant, { activeJobs: 2 });
    elapsed = 1;
    expect(await cachedQuotaOverride(process, tenant, clock)).toEqual({ activeJobs: 2 });
    // And it stays so for the rest of the cache's time.
    elapsed = 9_999;
    expect(await cachedQuotaOverride(process, tenant, clock)).toEqual({ activeJobs: 2 });
  });
});
