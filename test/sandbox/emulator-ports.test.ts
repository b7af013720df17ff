import { createServer, type Server } from "node:http";
import { describe, expect, it } from "vitest";
import { startDynamoDbLocal } from "../../infra/sandbox/emulators.js";

const listen = (port = 0): Promise<Server> =>
  new Promise((resolve, reject) => {
    // An HTTP server, as the emulators that race for ports are; it answers nothing DynamoDB would.
    const server = createServer((_, response) => response.writeHead(503).end());
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server));
  });

const portOf = (server: Server): number => {
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
};

const close = (server: Server) => new Promise<void>((resolve) => server.close(() => resolve()));

/**
 * A port picked free can be bound by another process before the JVM binds it (fresh-clone CI
 * at cb36eac: a test file's sandbox failed with "DynamoDB Local exited during startup … Address
 * already in use"). The start then picks again.
 */
describe("DynamoDB Local's port", () => {
  it("is picked again when another process binds the picked one first", async () => {
    const squatter = await listen();
    const taken = portOf(squatter);
    const picks: number[] = [];
    const pickPort = async () => {
      if (picks.length === 0) {
        picks.push(taken);
        return taken;
      }
      const probe = await listen();
      const port = portOf(probe);
      await close(probe);
      picks.push(port);
      return port;
    };
    try {
      const dynamo = await startDynamoDbLocal({ pickPort });
      try {
        expect(picks).toHaveLength(2);
        expect(dynamo.endpoint).toBe(`http://127.0.0.1:${picks[1]}`);
      } finally {
        await dynamo.stop();
      }
    } finally {
      await close(squatter);
    }
  }, 60_000);

  it("is not picked again when the caller named it: the caller is told", async () => {
    const squatter = await listen();
    try {
      await expect(startDynamoDbLocal({ port: portOf(squatter) })).rejects.toThrow(
        /exited during startup/,
      );
    } finally {
      await close(squatter);
    }
  }, 60_000);
});
