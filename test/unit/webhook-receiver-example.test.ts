import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage, request } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * examples/webhook-receiver.ts, run as the README runs it (`node --import tsx`), sent deliveries
 * signed the Standard Webhooks way. A body reaches a receiver in as many chunks as its TCP segments
 * or TLS records cut it into, wherever they fall, so a test writes it in two parts with a pause
 * between them.
 */
const SECRET = `whsec_${randomBytes(32).toString("base64")}`;
let receiver: ChildProcess;
let port = 0;
let printed = "";

/** A port free now: the example takes its port from PORT and prints that, not the one bound. */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port: free } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return free;
}

beforeAll(async () => {
  port = await freePort();
  receiver = spawn(process.execPath, ["--import", "tsx", "examples/webhook-receiver.ts"], {
    env: { ...process.env, WEBHOOK_SECRET: SECRET, PORT: String(port), FAIL: "" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  receiver.stdout?.setEncoding("utf8");
  receiver.stdout?.on("data", (text: string) => {
    printed += text;
  });
  while (!printed.includes("receiver on")) {
    if (receiver.exitCode !== null) throw new Error(`the receiver exited ${receiver.exitCode}`);
    await sleep(50);
  }
});

afterAll(async () => {
  if (receiver.exitCode !== null) return;
  receiver.kill();
  await once(receiver, "exit");
});

/** POSTs `body` signed for `id`, its bytes cut at `cut` into two writes; the receiver's status. */
async function deliver(id: string, body: string, cut: number): Promise<number> {
  const bytes = Buffer.from(body, "utf8");
  const sentAt = new Date();
  const req = request({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: "/hook",
    headers: {
      "Content-Type": "application/json",
      "Content-Length": bytes.length,
      "webhook-id": id,
      "webhook-timestamp": String(Math.floor(sentAt.getTime() / 1000)),
      "webhook-signature": new Webhook(SECRET).sign(id, sentAt, body),
      "X-Scheduler-Attempt": "1",
    },
  });
  const answered = once(req, "response");
  req.write(bytes.subarray(0, cut));
  await sleep(100);
  req.end(bytes.subarray(cut));
  const [response] = (await answered) as [IncomingMessage];
  response.resume();
  return response.statusCode ?? 0;
}

describe("examples/webhook-receiver.ts", () => {
  it("verifies and applies a body whose chunks split a multi-byte character", async () => {
    const id = "01JOBEXAMPLE@2026-12-04T09:30:00.000Z";
    const body = JSON.stringify({ greeting: "日本語 ✓" });
    // Inside 日 (three bytes in UTF-8): each chunk decoded on its own turns both halves into U+FFFD.
    const cut = Buffer.from(body, "utf8").indexOf(Buffer.from("日", "utf8")) + 1;
    expect(await deliver(id, body, cut)).toBe(200);
    await expect.poll(() => printed).toContain(`applied ${id} attempt 1: ${body}`);
  });
});
