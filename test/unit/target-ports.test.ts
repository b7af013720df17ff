import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { TargetSchema } from "../../shared/api/schemas/target.js";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import { FETCH_BLOCKED_PORTS } from "../../shared/execution/target-reach.js";
import {
  httpContext,
  httpHandlerWith,
  LOOPBACK_WORKERS,
  useCountingReceiver,
} from "../support/http-handler.js";

/**
 * The Fetch standard's "bad ports" (SMTP, IRC, X11, …): undici's fetch, which delivers every
 * webhook, fails a request to one of them before connecting ("fetch failed: bad port"). A target
 * naming one was accepted (201), and every attempt of every run failed, retried, until dead.
 */

/** undici's own list, read from its internals: the one the worker's fetch checks against. */
function undiciBadPorts(): readonly string[] {
  const require = createRequire(import.meta.url);
  const constants: unknown = require("undici/lib/web/fetch/constants.js");
  const ports = (constants as { badPorts?: unknown }).badPorts;
  if (!Array.isArray(ports))
    throw new Error("undici no longer exports badPorts from its constants");
  return ports.map(String);
}

const refusalOf = (url: string) => {
  const parsed = TargetSchema.safeParse({ url });
  return parsed.success
    ? null
    : parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("target ports fetch blocks", () => {
  it("are the ports undici's fetch blocks, no more and no fewer", () => {
    expect([...FETCH_BLOCKED_PORTS].sort()).toEqual([...undiciBadPorts()].sort());
  });

  it.each([
    "http://receiver.example:6000/hook",
    "https://receiver.example:25/hook",
    "https://receiver.example:10080/",
    "http://[2606:4700::1111]:6667/hook",
  ])("are refused at the API, naming the url and the port: %s", (url) => {
    const port = new URL(url).port;
    expect(refusalOf(url)).toEqual([
      `url: must not name port ${port}, which fetch blocks (the Fetch standard's bad ports): no delivery could be sent to it`,
    ]);
  });

  it.each([
    "https://receiver.example/hook",
    "http://receiver.example:80/hook",
    "https://receiver.example:8443/hook",
    "http://receiver.example:6001/hook",
  ])("leave every other port alone: %s", (url) => {
    expect(refusalOf(url)).toBeNull();
  });
});

describe("a stored target on a port fetch blocks", () => {
  const receiver = useCountingReceiver();

  // A job stored before the API refused such ports still has one: its delivery can never be made,
  // so the run is dead at once, saying why, rather than retried to the end of its attempts.
  it.each(LOOPBACK_WORKERS)(
    "%s fails it without a retry, naming the port",
    async (_, settings, host) => {
      const port = receiver.port();
      expect(await httpHandlerWith(settings)(httpContext(`http://${host}:${port}/hook`))).toEqual({
        status: 200,
      });
      const error = await httpHandlerWith(settings)(httpContext(`http://${host}:6000/hook`)).then(
        (answer) => new Error(`delivered: ${JSON.stringify(answer)}`),
        (thrown: unknown) => thrown,
      );
      expect(error).toBeInstanceOf(JobError);
      expect((error as JobError).message).toBe(
        `target ${host} names port 6000, which fetch blocks (the Fetch standard's bad ports); refused`,
      );
      expect(isRetryable(error as JobError)).toBe(false);
      expect(receiver.hits()).toBe(LOOPBACK_WORKERS.findIndex(([name]) => name === _) + 1);
    },
  );
});

describe("a stored target whose host no DNS name can be", () => {
  // The resolver refuses such a name before asking (EBADNAME), on every attempt: the run is dead at
  // once, saying why, rather than retried to the end of its attempts.
  it.each(LOOPBACK_WORKERS)("%s fails it without a retry, naming the host", async (_, settings) => {
    for (const host of [`${"a".repeat(64)}.example`, "receiver..example"]) {
      const error = await httpHandlerWith(settings)(httpContext(`http://${host}/hook`)).then(
        (answer) => new Error(`delivered: ${JSON.stringify(answer)}`),
        (thrown: unknown) => thrown,
      );
      expect(error).toBeInstanceOf(JobError);
      expect((error as JobError).message).toBe(
        `target ${host} is no DNS name (labels of 1 to 63 characters, 253 in all); refused`,
      );
      expect(isRetryable(error as JobError)).toBe(false);
    }
  });
});
