import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * The typed client's examples, run as docs/cli.md runs them (`npx tsx examples/….ts`), pointed
 * by SCHEDULER_API_URL and SCHEDULER_API_KEY at a server that answers every request 401: a
 * sandbox started on another port (`npm start -- --port N`) or a deployed stage is reached only
 * through them.
 */
const KEY = "example-key";
const seen: { method: string; url: string; headers: IncomingHttpHeaders }[] = [];
const server = createServer((req, res) => {
  seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers });
  req.resume();
  res.writeHead(401, { "Content-Type": "application/json" });
  res.end(JSON.stringify({ error: { code: "unauthorized", message: "not this key" } }));
});
let apiUrl = "";

beforeAll(async () => {
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** Runs the example to its end (its first request refused, it throws) and gives its exit code. */
async function run(example: string): Promise<number | null> {
  const child = spawn(process.execPath, ["--import", "tsx", `examples/${example}`], {
    env: { ...process.env, SCHEDULER_API_URL: apiUrl, SCHEDULER_API_KEY: KEY },
    stdio: "ignore",
  });
  const killer = setTimeout(() => child.kill(), 20_000);
  const [code] = (await once(child, "exit")) as [number | null];
  clearTimeout(killer);
  return code;
}

describe("examples/client.ts and examples/client-tour.ts", () => {
  it.each(["client.ts", "client-tour.ts"])(
    "%s sends its first request to SCHEDULER_API_URL with SCHEDULER_API_KEY",
    async (example) => {
      seen.length = 0;
      const code = await run(example);
      expect(seen.map(({ method, url }) => `${method} ${url}`)).toEqual(["POST /jobs"]);
      expect(seen[0]?.headers.authorization).toBe(`Bearer ${KEY}`);
      expect(code).toBe(1);
    },
    30_000,
  );
});
