import { getEventListeners } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { ReadableStream } from "node:stream/web";
import { type fetch, Response, fetch as undiciFetch } from "undici";
import { describe, expect, it, vi } from "vitest";
import { sleep } from "../../shared/clock.js";
import { RunCancelledError } from "../../shared/errors.js";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import { abortedBy, outboundDispatcher } from "../../shared/execution/outbound.js";
import { httpContext, httpHandlerWith } from "../support/http-handler.js";

/**
 * A delivery waits for its receiver as long as the target's `timeoutSeconds`, and no longer than
 * the run (a cancel, a lost lease) lets it, whatever the HTTP client does with its abort: Node
 * 20's fetch can lose one (the signals `AbortSignal.any` and a `Request` make are held weakly and
 * may be collected first), and the client's requests hung so (39d1756). Here the fetch ignores
 * its signal, as a fetch whose abort was lost does.
 */
const URL_OF_TARGET = "http://127.0.0.1:2/hook";

/** The handler's outcome, or "still waiting" once `ms` have passed without one. */
async function outcomeWithin(delivery: Promise<unknown>, ms: number): Promise<unknown> {
  return Promise.race([
    delivery.then(
      (value) => ({ value }),
      (error: unknown) => error,
    ),
    sleep(ms).then(() => `still waiting after ${ms} ms`),
  ]);
}

/** A fetch that never answers and ignores its signal; it keeps the signal it was given. */
function neverAnswering() {
  const given: { signal?: AbortSignal | null } = {};
  const send: typeof fetch = (_input, init) => {
    given.signal = init?.signal;
    return new Promise<Response>(() => undefined);
  };
  return { send, given };
}

describe("a delivery whose fetch loses its abort", () => {
  it("the target's timeout ends the attempt, as timed out, and still aborts the request", async () => {
    const { send, given } = neverAnswering();
    const handler = httpHandlerWith({ allowPrivateTargets: true, fetch: send });
    const started = Date.now();
    const outcome = await outcomeWithin(
      handler(httpContext(URL_OF_TARGET, { timeoutSeconds: 1 })),
      4000,
    );
    expect(outcome).toBeInstanceOf(JobError);
    const error = outcome as JobError;
    expect(error.message).toBe(`POST ${URL_OF_TARGET}: timed out after 1 s`);
    expect(isRetryable(error)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    // The abort is still sent, so a fetch that heeds it closes the connection.
    expect(given.signal?.aborted).toBe(true);
  });

  it("a cancel of the run (its signal) ends the attempt at once, with the cancel's reason", async () => {
    const { send, given } = neverAnswering();
    const handler = httpHandlerWith({ allowPrivateTargets: true, fetch: send });
    const run = new AbortController();
    const delivery = handler({
      ...httpContext(URL_OF_TARGET, { timeoutSeconds: 30 }),
      signal: run.signal,
    });
    await sleep(100);
    const cancel = new RunCancelledError("run-1", "user:alice", "2026-12-04T16:00:00.000Z");
    run.abort(cancel);
    const outcome = await outcomeWithin(delivery, 2000);
    expect(outcome).toBeInstanceOf(JobError);
    expect((outcome as JobError).message).toBe(`POST ${URL_OF_TARGET}: ${cancel.message}`);
    expect((outcome as JobError).cause).toBe(cancel);
    expect(given.signal?.aborted).toBe(true);
  });

  it("headers, then a body trickled for ever: the timeout ends the read, keeping what was read", async () => {
    const body = { cancelled: false };
    const trickling: typeof fetch = async () =>
      new Response(
        new ReadableStream<Uint8Array>({
          async pull(controller) {
            await sleep(50);
            controller.enqueue(new TextEncoder().encode("x"));
          },
          cancel() {
            body.cancelled = true;
          },
        }),
        { status: 500 },
      );
    const handler = httpHandlerWith({ allowPrivateTargets: true, fetch: trickling });
    const outcome = await outcomeWithin(
      handler(httpContext(URL_OF_TARGET, { timeoutSeconds: 1 })),
      4000,
    );
    expect(outcome).toBeInstanceOf(JobError);
    expect((outcome as JobError).message).toMatch(
      new RegExp(`^POST ${URL_OF_TARGET}: HTTP 500 x{5,}$`),
    );
    expect(isRetryable(outcome as JobError)).toBe(true);
    // The read given up on is cancelled, which closes the connection whether or not the abort came.
    expect(body.cancelled).toBe(true);
  });
});

describe("a receiver that sends its headers, then trickles its body for ever", () => {
  it("is given up on at the target's timeout, what it sent kept, its connection closed", async () => {
    const connection = { closed: false };
    const receiver = createServer((_req, res) => {
      res.on("close", () => {
        connection.closed = true;
      });
      res.writeHead(500, { "Content-Type": "text/plain" });
      const trickle = setInterval(() => res.write("x"), 50);
      res.on("close", () => clearInterval(trickle));
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    try {
      const handler = httpHandlerWith({ allowPrivateTargets: true });
      const outcome = await outcomeWithin(handler(httpContext(url, { timeoutSeconds: 1 })), 4000);
      expect(outcome).toBeInstanceOf(JobError);
      expect((outcome as JobError).message).toMatch(new RegExp(`^POST ${url}: HTTP 500 x+$`));
      await vi.waitFor(() => expect(connection.closed).toBe(true));
    } finally {
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
});

describe("a receiver that never answers, the delivery's abort lost", () => {
  it("has its connection closed at the target's timeout, not held for good", async () => {
    const connection = { opened: false, closed: false };
    const receiver = createServer(() => undefined);
    receiver.on("connection", (socket) => {
      connection.opened = true;
      socket.on("close", () => {
        connection.closed = true;
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    // undici's fetch on the worker's own dispatcher, its signal lost as a collected one is.
    const abortLost: typeof fetch = (input, init) => undiciFetch(input, { ...init, signal: null });
    try {
      const handler = httpHandlerWith({ allowPrivateTargets: true, fetch: abortLost });
      const outcome = await outcomeWithin(handler(httpContext(url, { timeoutSeconds: 1 })), 4000);
      expect(outcome).toBeInstanceOf(JobError);
      expect((outcome as JobError).message).toBe(`POST ${url}: timed out after 1 s`);
      expect(connection.opened).toBe(true);
      await vi.waitFor(() => expect(connection.closed).toBe(true), { timeout: 2000 });
    } finally {
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
});

describe("abortedBy, the dispatcher a delivery's request goes through", () => {
  it("follows the signal while the request lasts, not after: what it holds goes with the request", async () => {
    const receiver = createServer((req, res) => {
      req.resume();
      // The answer's end comes later, so the request is under way when its headers are read.
      req.on("end", () => {
        res.write("o");
        setTimeout(() => res.end("k"), 100);
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const origin = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    const agent = outboundDispatcher({ allowPrivateTargets: true });
    const limit = new AbortController();
    try {
      const answer = await abortedBy(agent, limit.signal).request({
        origin,
        path: "/hook",
        method: "POST",
        body: "{}",
      });
      expect(getEventListeners(limit.signal, "abort")).toHaveLength(1);
      expect(await answer.body.text()).toBe("ok");
      expect(getEventListeners(limit.signal, "abort")).toHaveLength(0);
    } finally {
      await agent.close();
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });

  it("aborts a request whose signal aborted before it had a connection, at its connection", async () => {
    const receiver = createServer(() => undefined);
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const origin = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    const agent = outboundDispatcher({ allowPrivateTargets: true });
    const limit = new AbortController();
    const cancel = new Error("cancelled by alice");
    limit.abort(cancel);
    try {
      const answer = abortedBy(agent, limit.signal).request({ origin, path: "/", method: "GET" });
      expect(await outcomeWithin(answer, 2000)).toBe(cancel);
    } finally {
      await agent.destroy();
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
});
