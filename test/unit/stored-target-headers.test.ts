import { describe, expect, it } from "vitest";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import {
  httpContext,
  httpHandlerWith,
  LOOPBACK_WORKERS,
  useCountingReceiver,
} from "../support/http-handler.js";

/**
 * A job stored before the API refused connection headers in `target.headers` (Expect, Keep-Alive
 * and Upgrade were accepted until then) still has one. The delivery's HTTP client refuses to send
 * it ("invalid expect header"), on every attempt alike: the run is dead at once, saying why, and
 * nothing is sent, rather than retried to the end of its attempts.
 */
describe("a stored target with a connection header", () => {
  const receiver = useCountingReceiver();

  const delivery = (host: string, headers: Record<string, string>) => {
    const url = `http://${host}:${receiver.port()}/hook`;
    const ctx = httpContext(url);
    return { ...ctx, target: { url, headers, timeoutSeconds: 5 } };
  };

  it.each(LOOPBACK_WORKERS)(
    "%s fails it without a retry, naming the header, and sends nothing",
    async (_, settings, host) => {
      const handler = httpHandlerWith(settings);
      expect(await handler(delivery(host, { Authorization: "Bearer x" }))).toEqual({
        status: 200,
      });
      const sent = receiver.hits();
      for (const [name, value] of [
        ["Expect", "100-continue"],
        ["keep-alive", "timeout=5"],
        ["Upgrade", "websocket"],
        ["Connection", "close"],
        ["Content-Length", "2"],
        ["Transfer-Encoding", "chunked"],
      ] as const) {
        const error = await handler(delivery(host, { "X-Custom": "yes", [name]: value })).then(
          (answer) => new Error(`delivered: ${JSON.stringify(answer)}`),
          (thrown: unknown) => thrown,
        );
        expect(error).toBeInstanceOf(JobError);
        expect((error as JobError).message).toBe(
          `the target's header ${name} is a connection header, which a delivery cannot send; refused`,
        );
        expect(isRetryable(error as JobError)).toBe(false);
      }
      expect(receiver.hits()).toBe(sent);
    },
  );
});
