import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import { MAX_RECEIVED_BYTES } from "../../shared/execution/received-bytes.js";
import { httpContext, httpHandlerWith } from "../support/http-handler.js";

/**
 * A receiver's answer in Content-Encoding: fetch inflates it as the body is read, so the 1 MiB the
 * worker takes from the connection (received-bytes.ts) bounds the compressed answer only. A tenant's
 * receiver answering 512 MiB of zeros gzipped into half a megabyte (or twice gzipped, into 1 KB)
 * must cost the worker, which runs every tenant's runs, what the delivery reads of it (64 KiB),
 * not the whole: inflated whole, a few such deliveries at once take a Lambda's memory.
 */
const INFLATED_BYTES = 512 * 1024 * 1024;
const once = gzipSync(Buffer.alloc(INFLATED_BYTES), { level: 9 });
const twice = gzipSync(once, { level: 9 });

let server: Server;
let port = 0;
beforeAll(async () => {
  server = createServer((req, res) => {
    const [, status = "200", layers = "1"] = req.url?.split("/") ?? [];
    res
      .writeHead(Number(status), {
        "Content-Type": "text/plain",
        "Content-Encoding": layers === "2" ? "gzip, gzip" : "gzip",
      })
      .end(layers === "2" ? twice : once);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

/** The handler's outcome and the most the process's memory grew by while it ran, in MiB. */
async function delivered(path: string): Promise<{ outcome: string; grewMiB: number }> {
  const before = process.memoryUsage().rss;
  let peak = before;
  const sample = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 2);
  try {
    const outcome = await httpHandlerWith({ allowPrivateTargets: true })(
      httpContext(`http://127.0.0.1:${port}${path}`),
    ).then(
      (answer) => JSON.stringify(answer),
      (error: unknown) => {
        expect(error).toBeInstanceOf(JobError);
        return `${isRetryable(error as JobError) ? "retryable" : "final"}: ${(error as Error).message}`;
      },
    );
    peak = Math.max(peak, process.memoryUsage().rss);
    return { outcome, grewMiB: (peak - before) / 1024 / 1024 };
  } finally {
    clearInterval(sample);
  }
}

describe("a receiver's compressed answer that inflates to 512 MiB", () => {
  it("is smaller than what the worker takes from a connection, so only the inflating can bound it", () => {
    expect(once.length).toBeLessThan(MAX_RECEIVED_BYTES);
    expect(twice.length).toBeLessThan(64 * 1024);
  });

  it.each([
    ["/200/1", "gzip", JSON.stringify({ status: 200 })],
    ["/500/1", "gzip", `retryable: POST http://127.0.0.1:PORT/500/1: HTTP 500 ${"\0".repeat(200)}`],
    ["/200/2", "gzip, gzip", JSON.stringify({ status: 200 })],
  ])(
    "%s (%s) is read to its start only: the worker's memory grows far less than it",
    async (path, _, expected) => {
      const { outcome, grewMiB } = await delivered(path);
      expect(outcome).toBe(expected.replace("PORT", String(port)));
      expect(grewMiB).toBeLessThan(128);
    },
  );
});
