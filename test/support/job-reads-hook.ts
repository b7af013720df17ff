import type { TestContext } from "vitest";
import type { Engine } from "../../shared/engine.js";
import type { EngineFixture } from "./engine-fixture.js";
import { createTestClients } from "./namespace.js";

/**
 * An engine like the fixture's whose reads of the jobs table (GetItem, or a BatchGetItem naming
 * it) first call `onRead`, which may throw to fail the read (a throttled job item) or act first.
 */
export function withJobReadHook(
  f: EngineFixture,
  onTestFinished: TestContext["onTestFinished"],
  onRead: () => Promise<void> | void,
): Engine {
  const clients = createTestClients();
  onTestFinished(() => clients.destroy());
  clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      const command = context.commandName ?? "";
      const readsJobs =
        (command.startsWith("GetItem") && input.TableName === f.engine.tables.jobs) ||
        (command.startsWith("BatchGetItem") &&
          Object.keys((input.RequestItems as Record<string, unknown> | undefined) ?? {}).includes(
            f.engine.tables.jobs,
          ));
      if (readsJobs) await onRead();
      return next(args);
    },
    { step: "initialize", name: "jobReadHook" },
  );
  return { ...f.engine, doc: clients.doc };
}

/** A throttling error as DynamoDB answers past the SDK's retries. */
export const throttled = () =>
  Object.assign(new Error("The level of configured provisioned throughput was exceeded"), {
    name: "ProvisionedThroughputExceededException",
  });
