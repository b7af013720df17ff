import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent, fetch } from "undici";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { httpContext, httpHandlerWith } from "../support/http-handler.js";

/**
 * A delivery waits for its receiver's answer as long as the target's `timeoutSeconds` says (up
 * to 900 s). The HTTP client's own timer (undici's headers timeout, 300 s by default) must not cut
 * it shorter. The test fakes undici's timers, which only works from undici's first request on: the
 * file runs in a project that gives each file its own process (not the unit or services projects,
 * which share modules between files), and a plain client beside the delivery checks that the
 * faked clock did reach undici's timers.
 */
let held: ServerResponse[] = [];
let port = 0;
const server = createServer((_req, res) => {
  held.push(res);
});

beforeAll(async () => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  vi.useRealTimers();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

/** Settles the promise's outcome into a value, so a rejection is seen when it happens. */
function outcomeOf(promise: Promise<unknown>) {
  const outcome: { settled?: { value: unknown } | { error: unknown } } = {};
  promise.then(
    (value) => {
      outcome.settled = { value };
    },
    (error: unknown) => {
      outcome.settled = { error };
    },
  );
  return outcome;
}

describe("a receiver that answers slowly, within the target's timeout", () => {
  it("is waited for past 300 s: its headers at 310 s of a 900 s timeout", async () => {
    held = [];
    const plain = outcomeOf(
      fetch(`http://127.0.0.1:${port}/plain`, { method: "POST", dispatcher: new Agent() }),
    );
    await vi.waitFor(() => expect(held).toHaveLength(1), { timeout: 10_000 });
    const delivery = outcomeOf(
      httpHandlerWith({ allowPrivateTargets: true })(
        httpContext(`http://127.0.0.1:${port}/slow`, { timeoutSeconds: 900 }),
      ),
    );
    await vi.waitFor(() => expect(held).toHaveLength(2), { timeout: 10_000 });
    // undici's timers run on the faked clock, and so does the handler's own 900 s limit, not reached.
    vi.advanceTimersByTime(310_000);
    // The plain client gave up at its 300 s headers timeout: the faked clock reached undici.
    await vi.waitFor(() => expect(plain.settled).toHaveProperty("error"), { timeout: 10_000 });
    expect(String((plain.settled as { error: Error }).error.cause)).toMatch(/HeadersTimeoutError/);
    expect(delivery.settled).toBeUndefined();
    held[1]?.writeHead(200, { "Content-Type": "text/plain" }).end("ok");
    await vi.waitFor(() => expect(delivery.settled).toEqual({ value: { status: 200 } }), {
      timeout: 10_000,
    });
  });
});
