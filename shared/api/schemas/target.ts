/** Where an http job delivers: the URL, the receiver's headers and the per-delivery timeout. */
import { z } from "@hono/zod-openapi";
import { boundedInt } from "../../bounded-int.js";
import {
  CONNECTION_HEADERS,
  DNS_NAME_RULE,
  FETCH_BLOCKED_PORTS,
  isResolvableHost,
} from "../../execution/target-reach.js";
import { LIMITS } from "./common.js";

const HEADER_NAME = /^[A-Za-z0-9][A-Za-z0-9-]*$/;
// Visible ASCII, spaces and tabs: anything else would make the worker's request fail at run time.
const HEADER_VALUE = /^[\x20-\x7E\t]*$/;

export const TargetSchema = z
  .strictObject({
    url: z
      .string()
      .max(LIMITS.urlChars)
      .refine(isHttpUrl, { message: "must be an absolute http:// or https:// URL" })
      // fetch refuses a URL with credentials, so every delivery would fail; and runs' errors name the URL.
      .refine(hasNoUserinfo, {
        message:
          "must not carry credentials (user:password@): send them in a header such as Authorization",
      })
      // TCP has no port 0: no delivery to it could connect, and every attempt would fail.
      .refine(hasConnectablePort, { message: "must not name port 0" })
      // fetch fails a request to one of its blocked ports before connecting: every attempt would.
      .superRefine(checkFetchablePort)
      // The URL parser takes hosts DNS cannot hold (a..b, a 64-character label): none resolves.
      .refine(hasResolvableHost, {
        message: `must name a host that is an IP address or a DNS name (${DNS_NAME_RULE})`,
      })
      .openapi({ example: "https://example.com/hooks/report", format: "uri" }),
    headers: z
      .record(
        z.string().max(256).regex(HEADER_NAME, "must be letters, digits and hyphens"),
        z.string().max(LIMITS.headerValueChars).regex(HEADER_VALUE, "must be printable ASCII"),
      )
      .superRefine(checkHeaderNames)
      .optional()
      .openapi({
        description:
          "Sent with every delivery. The scheduler sets Content-Type, Host, Idempotency-Key, webhook-* and X-Scheduler-* itself; connection headers (Connection, Content-Length, Expect, Keep-Alive, Transfer-Encoding, Upgrade) cannot be set.",
        example: { Authorization: "Bearer receiver-token" },
      }),
    timeoutSeconds: boundedInt(1, LIMITS.timeoutSeconds.max)
      .optional()
      .openapi({ description: "Per-delivery timeout; default 30." }),
    mode: z.enum(["sync", "async"]).optional().openapi({
      description:
        "sync (default): the delivery's answer is the run's result. async (long jobs): a 202 answer hands the run over to the target, which heartbeats and completes it with the run token its delivery carries (POST /runs/{runId}/heartbeat and /complete); any other 2xx is the result at once.",
    }),
  })
  .openapi("HttpTarget", { description: "Where an http job POSTs its payload." });

const RESERVED_HEADERS = new Set(["content-type", "host", "idempotency-key"]);

/** Names fetch would merge or that the worker sets itself would reach the receiver garbled. */
function checkHeaderNames(headers: Record<string, string>, ctx: z.RefinementCtx): void {
  const names = Object.keys(headers);
  if (names.length > LIMITS.targetHeaders) {
    ctx.addIssue({ code: "custom", message: `at most ${LIMITS.targetHeaders} headers` });
  }
  const seen = new Set<string>();
  for (const name of names) {
    const lower = name.toLowerCase();
    if (
      RESERVED_HEADERS.has(lower) ||
      lower.startsWith("x-scheduler-") ||
      lower.startsWith("webhook-")
    ) {
      ctx.addIssue({ code: "custom", path: [name], message: "is set by the scheduler itself" });
    } else if (CONNECTION_HEADERS.has(lower)) {
      ctx.addIssue({
        code: "custom",
        path: [name],
        message: "is a connection header, which deliveries cannot set",
      });
    } else if (seen.has(lower)) {
      ctx.addIssue({
        code: "custom",
        path: [name],
        message: "is given twice (names are case-insensitive)",
      });
    }
    seen.add(lower);
  }
}

function isHttpUrl(value: string): boolean {
  if (!URL.canParse(value)) return false;
  const url = new URL(value);
  return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "";
}

function hasNoUserinfo(value: string): boolean {
  if (!URL.canParse(value)) return true;
  const url = new URL(value);
  return url.username === "" && url.password === "";
}

function hasConnectablePort(value: string): boolean {
  return !URL.canParse(value) || new URL(value).port !== "0";
}

function hasResolvableHost(value: string): boolean {
  return !URL.canParse(value) || isResolvableHost(new URL(value).hostname);
}

function checkFetchablePort(value: string, ctx: z.RefinementCtx): void {
  const port = URL.canParse(value) ? new URL(value).port : "";
  if (FETCH_BLOCKED_PORTS.has(port)) {
    ctx.addIssue({
      code: "custom",
      message: `must not name port ${port}, which fetch blocks (the Fetch standard's bad ports): no delivery could be sent to it`,
    });
  }
}
