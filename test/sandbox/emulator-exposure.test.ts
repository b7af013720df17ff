import { readFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  startDynamoDbLocal,
  startSqsEmulator,
  type TimedEmulator,
} from "../../infra/sandbox/emulators.js";

/**
 * The sandbox's API answers only requests to a loopback name (docs/api.md, "Authentication"), and
 * its emulators hold every tenant's jobs, their targets' headers (receivers' credentials) and
 * webhook secrets, with no credentials checked (DynamoDB Local takes any signature). An adversarial
 * review: the emulators the sandbox starts must not answer on the machine's other addresses, or
 * anyone on its network reads and writes every tenant's data past the API.
 */
let emulators: TimedEmulator[] = [];
beforeAll(async () => {
  emulators = [await startDynamoDbLocal(), await startSqsEmulator()];
}, 60_000);
afterAll(async () => {
  await Promise.all(emulators.map((emulator) => emulator.stop()));
});

/** This machine's addresses that are not loopback (its network interfaces'). */
const outsideAddresses = () =>
  Object.values(networkInterfaces())
    .flatMap((addresses) => addresses ?? [])
    .filter((address) => !address.internal && address.family === "IPv4")
    .map((address) => address.address);

/** Whether an HTTP request to `host:port` is answered at all (any status), within 2 s. */
async function answers(host: string, port: string): Promise<boolean> {
  try {
    await fetch(`http://${host}:${port}/`, {
      method: "POST",
      headers: {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        Authorization:
          "AWS4-HMAC-SHA256 Credential=anyone/20000101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0",
      },
      body: "{}",
      signal: AbortSignal.timeout(2_000),
    });
    return true;
  } catch {
    return false;
  }
}

/**
 * The local addresses Linux (the sandbox's and CI's system) lists as listening on `port` (/proc/net/tcp and tcp6, state 0A), in
 * its hex form: 0100007F for 127.0.0.1, 00000000 for every IPv4 address.
 */
function listeningAddresses(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  return ["/proc/net/tcp", "/proc/net/tcp6"].flatMap((table) =>
    readFileSync(table, "utf8")
      .split("\n")
      .slice(1)
      .map((line) => line.trim().split(/\s+/))
      .filter((fields) => fields[3] === "0A" && fields[1]?.endsWith(`:${hexPort}`))
      .map((fields) => String(fields[1]).slice(0, -5)),
  );
}

/** 127.0.0.1, as IPv4 or IPv4-mapped IPv6 (Jetty's socket), in /proc/net's hex. */
const LOOPBACK_HEX = new Set(["0100007F", "0000000000000000FFFF00000100007F"]);

describe("the sandbox's emulators", () => {
  it("listen on 127.0.0.1 only (the kernel's own list of listening sockets)", () => {
    for (const emulator of emulators) {
      const listening = listeningAddresses(Number(new URL(emulator.endpoint).port));
      expect(listening.length, emulator.name).toBeGreaterThan(0);
      expect(
        listening.filter((address) => !LOOPBACK_HEX.has(address)),
        emulator.name,
      ).toEqual([]);
    }
  });

  it("answer on loopback, and on none of the machine's other addresses", async () => {
    const outside = outsideAddresses();
    const reached: string[] = [];
    for (const emulator of emulators) {
      const { port } = new URL(emulator.endpoint);
      expect(await answers("127.0.0.1", port), emulator.name).toBe(true);
      for (const host of outside) {
        if (await answers(host, port)) reached.push(`${emulator.name} at ${host}:${port}`);
      }
    }
    expect(reached).toEqual([]);
  }, 60_000);
});
