import { ProvisionedThroughputExceededException } from "@aws-sdk/client-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tickOnce } from "../../shared/dispatch/tick.js";
import type { Engine } from "../../shared/engine.js";
import { createJob } from "../../shared/jobs/index.js";
import {
  createEngineFixture,
  type EngineFixture,
  engineAt,
  testJob,
} from "../support/engine-fixture.js";
import { withFaults } from "../support/faults.js";

const MINUTE = 60_000;

/**
 * What a create writes (docs/architecture.md, "Create"): a job whose first due entry no pass
 * sweeps yet is two plain puts, the entry first and the job as the commit; an entry a pass may
 * sweep at any moment is written in one transaction with its job.
 */
describe("a create's writes", () => {
  let f: EngineFixture;
  beforeAll(async () => {
    f = await createEngineFixture();
  });
  afterAll(() => f.destroy());

  const at = (instant: number): Engine => engineAt(f.engine, instant);

  /** The DynamoDB writes `work` sends through `engine`'s client, by command name. */
  const commandsOf = async (engine: Engine, work: () => Promise<unknown>): Promise<string[]> => {
    const names: string[] = [];
    const name = "createWritesCounter";
    engine.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const command = context.commandName ?? "";
        if (!/^(Get|Query|Scan|BatchGet)/.test(command)) names.push(command);
        return next(args);
      },
      { step: "initialize", name, override: true },
    );
    try {
      await work();
    } finally {
      engine.doc.middlewareStack.remove(name);
    }
    return names;
  };

  it("the first create of a process also records its shard count, once", async () => {
    const runAt = new Date(Date.now() + 60 * MINUTE).toISOString();
    const create = () => createJob(f.engine, testJob({ schedule: { runAt } }));
    expect(await commandsOf(f.engine, create)).toEqual([
      "UpdateItemCommand",
      "PutItemCommand",
      "PutItemCommand",
    ]);
    expect(await commandsOf(f.engine, create)).toEqual(["PutItemCommand", "PutItemCommand"]);
  });

  it("a job due past the fast-path window is its due entry's put and then its own: no transaction", async () => {
    const runAt = new Date(Date.now() + 60 * MINUTE).toISOString();
    let jobId = "";
    const commands = await commandsOf(f.engine, async () => {
      jobId = (await createJob(f.engine, testJob({ schedule: { runAt } }))).job.jobId;
    });
    expect(commands).toEqual(["PutItemCommand", "PutItemCommand"]);
    expect((await f.dueEntries()).filter((d) => d.jobId === jobId)).toHaveLength(1);
  });

  it("a job whose own put fails after its entry's is not created: the claim removes the entry and nothing runs", async () => {
    const runAt = Date.now() + 90 * MINUTE;
    const faulty = withFaults(f.engine, {
      operation: "PutItem",
      times: 1,
      match: (input) => {
        const item = input.Item as Record<string, unknown> | undefined;
        return item?.sk === "JOB";
      },
      error: () =>
        new ProvisionedThroughputExceededException({
          message: "The level of configured provisioned throughput for the table was exceeded",
          $metadata: { httpStatusCode: 400 },
        }),
    });
    try {
      await expect(
        createJob(
          faulty.engine,
          testJob({ name: "never written", schedule: { runAt: new Date(runAt).toISOString() } }),
        ),
      ).rejects.toThrow(/provisioned throughput/);
    } finally {
      faulty.destroy();
    }
    const orphans = (await f.dueEntries()).filter((d) => d.dueAt === new Date(runAt).toISOString());
    expect(orphans).toHaveLength(1);
    const jobId = orphans[0]?.jobId ?? "";

    await tickOnce(at(runAt - MINUTE), "create-writes");
    expect((await f.dueEntries()).filter((d) => d.jobId === jobId)).toEqual([]);
    expect((await f.runs()).filter((r) => r.jobId === jobId)).toEqual([]);
  });

  it("a per-second job's entry after its first claim lies inside the window: it is written with its job in one transaction", async () => {
    const commands = await commandsOf(f.engine, () =>
      createJob(f.engine, testJob({ schedule: { cron: "* * * * * *", timezone: "UTC" } })),
    );
    expect(commands).toContain("TransactWriteItemsCommand");
  });
});
