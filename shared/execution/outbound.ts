import { constants } from "node:crypto";
import type { LookupAddress } from "node:dns";
import { Resolver as DnsResolver } from "node:dns/promises";
import { isIP, type LookupFunction } from "node:net";
import ipaddr from "ipaddr.js";
import { Agent, type Dispatcher } from "undici";
import { SchedulerError } from "../errors.js";
import { meteredConnector } from "./received-bytes.js";

/**
 * Where webhook deliveries may connect. A deployed worker reaches only public
 * unicast addresses: the name is resolved once, every address it resolves to
 * is vetted, and the socket connects to a vetted address (the resolver is the
 * connection's own lookup), so a name cannot answer the check with a public
 * address and the connection with a private one (DNS rebinding). TLS SNI and
 * the Host header stay the name of the URL.
 */

/** A name → its addresses, as `dns.lookup(name, { all: true })` answers. */
export type Resolver = (hostname: string) => Promise<readonly LookupAddress[]>;

/** How long a name may take to answer, its A and AAAA queries together. */
const RESOLVE_DEADLINE_MS = 5000;
/** c-ares's own pacing inside that bound: the first try's timeout (later ones are longer), tries. */
const QUERY_TIMEOUT_MS = 1000;
const QUERY_TRIES = 3;

export interface DnsResolverOptions {
  /** DNS servers (`ip` or `ip:port`), default the system's (/etc/resolv.conf). Tests point it at a fake. */
  readonly servers?: readonly string[];
  /** How long a name may take to answer, A and AAAA together: default 5000 ms. */
  readonly deadlineMs?: number;
}

/** RFC 6761: `localhost` and names under it are loopback, answered without asking DNS. */
const LOOPBACK: readonly LookupAddress[] = [
  { address: "127.0.0.1", family: 4 },
  { address: "::1", family: 6 },
];

type Answer = { readonly addresses: readonly string[] } | { readonly code: string };

/** The lookup's code of a failed query (ENODATA, ENOTFOUND, ETIMEOUT, ECANCELLED, …). */
function answerOf(query: Promise<string[]>): Promise<Answer> {
  return query.then(
    (addresses) => ({ addresses }),
    (error: unknown) => ({ code: (error as NodeJS.ErrnoException).code ?? String(error) }),
  );
}

const NO_SUCH_RECORD = new Set(["ENODATA", "ENOTFOUND"]);

/**
 * Webhook hosts' resolution for a deployed worker: DNS queries for A and AAAA (c-ares, on the
 * event loop), not `dns.lookup`, which is getaddrinfo on libuv's threadpool (4 threads, shared
 * with fs, zlib and crypto): a host whose DNS never answers held a thread for the system
 * resolver's timeouts, and a few such deliveries held them all, for every tenant. A name answers
 * within `deadlineMs` or fails naming itself (code ETIMEOUT), its queries cancelled; what one
 * family answered by then is used. No /etc/hosts and no search domains: a target host is a
 * public DNS name (or an IP literal, which never reaches here). `localhost` is loopback (RFC 6761).
 */
export function dnsResolver(options: DnsResolverOptions = {}): Resolver {
  const deadlineMs = options.deadlineMs ?? RESOLVE_DEADLINE_MS;
  return async (hostname) => {
    const family = isIP(hostname);
    if (family !== 0) return [{ address: hostname, family }];
    const name = hostname.toLowerCase().replace(/\.$/, "");
    if (name === "localhost" || name.endsWith(".localhost")) return LOOPBACK;
    // One channel per name, so that the deadline cancels this name's queries and no one else's.
    const resolver = new DnsResolver({ timeout: QUERY_TIMEOUT_MS, tries: QUERY_TRIES });
    if (options.servers) resolver.setServers([...options.servers]);
    const both = Promise.all([
      answerOf(resolver.resolve4(hostname)),
      answerOf(resolver.resolve6(hostname)),
    ]);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), deadlineMs);
    });
    const first = await Promise.race([both, late]);
    clearTimeout(timer);
    if (first === "late") resolver.cancel();
    const [v4, v6] = await both;
    const resolved = [
      ...("addresses" in v4 ? v4.addresses.map((address) => ({ address, family: 4 })) : []),
      ...("addresses" in v6 ? v6.addresses.map((address) => ({ address, family: 6 })) : []),
    ];
    if (resolved.length > 0) return resolved;
    const codes = [v4, v6].map((answer) => ("code" in answer ? answer.code : "ENODATA"));
    const error: NodeJS.ErrnoException =
      first === "late"
        ? new Error(`${hostname}: no A or AAAA answer within ${deadlineMs} ms`)
        : codes.every((code) => NO_SUCH_RECORD.has(code))
          ? new Error(`${hostname} has no A or AAAA record`)
          : new Error(`${hostname} did not resolve (A: ${codes[0]}, AAAA: ${codes[1]})`);
    error.code =
      first === "late"
        ? "ETIMEOUT"
        : (codes.find((code) => !NO_SUCH_RECORD.has(code)) ?? "ENOTFOUND");
    throw error;
  };
}

const defaultResolver = dnsResolver();

declare module "../errors.js" {
  interface ErrorContexts {
    /**
     * A webhook target the worker will not connect to (not a public unicast address); `address`,
     * for a name, is the refused address it resolved to.
     */
    readonly target_refused: { readonly hostname: string; readonly address?: string };
  }
}

/**
 * A target the worker will not connect to; delivering to it again cannot succeed. Its message is
 * the run's error, which the tenant reads: for a name it says which kind of address the name
 * resolves to, never the address, which stays in `context.address` for the worker's log. A
 * worker's resolver may answer names the tenant cannot ask (a private DNS zone, a VPC's
 * resolver), and naming the address would map them for any tenant that creates jobs.
 */
export class RefusedTargetError extends SchedulerError<"target_refused"> {
  override readonly name = "RefusedTargetError";

  constructor(hostname: string, why: string, address?: string) {
    super("target_refused", `target ${hostname} ${why}; refused`, {
      hostname,
      ...(address === undefined ? {} : { address }),
    });
  }
}

/** Public IPv6 unicast is allocated from 2000::/3; anything outside it is not a webhook receiver. */
const GLOBAL_UNICAST_V6 = ipaddr.IPv6.parseCIDR("2000::/3");

/**
 * Why an address is refused (its ipaddr.js range: `loopback`, `private`,
 * `linkLocal`, `rfc6052`, `reserved`, …), or null when it is public unicast.
 * IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) forms are
 * judged as the IPv4 address they carry; IPv4 is read in every form the URL
 * parser and `inet_aton` accept (`127.1`, `0x7f.1`, `0177.0.0.1`, `2130706433`).
 */
export function addressRefusal(literal: string): string | null {
  const text = literal.replace(/^\[|\]$/g, "");
  let address: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    address = ipaddr.process(text);
  } catch {
    return "not an IP address";
  }
  if (address.kind() === "ipv6") {
    const v6 = address as ipaddr.IPv6;
    if (v6.parts.slice(0, 6).every((part) => part === 0) && !isUnspecifiedOrLoopback(v6)) {
      // IPv4-compatible (::/96, deprecated): the IPv4 address in its last 32 bits.
      const [high = 0, low = 0] = v6.parts.slice(6);
      address = new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
    }
  }
  const range = address.range();
  if (range !== "unicast") return range;
  if (address.kind() === "ipv6" && !(address as ipaddr.IPv6).match(GLOBAL_UNICAST_V6))
    return "not global unicast";
  return null;
}

function isUnspecifiedOrLoopback(v6: ipaddr.IPv6): boolean {
  const range = v6.range();
  return range === "unspecified" || range === "loopback";
}

export function isPublicAddress(literal: string): boolean {
  return addressRefusal(literal) === null;
}

/**
 * A `net.connect` lookup that resolves once with `resolve` and answers only
 * when every address is public; otherwise the connection fails with a
 * RefusedTargetError before any socket is opened.
 */
function vettedLookup(
  resolve: Resolver,
  refusal: (address: string) => string | null = addressRefusal,
): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname).then(
      (resolved) => {
        for (const { address } of resolved) {
          const why = refusal(address);
          if (why !== null) {
            const refused = `resolves to a non-public address (${why})`;
            callback(new RefusedTargetError(hostname, refused, address), "");
            return;
          }
        }
        const family = options.family === 4 || options.family === 6 ? options.family : 0;
        const usable = resolved.filter((a) => family === 0 || a.family === family);
        const first = usable[0];
        if (first === undefined) {
          const error: NodeJS.ErrnoException = new Error(`${hostname} has no usable address`);
          error.code = "ENOTFOUND";
          callback(error, "");
          return;
        }
        if (options.all)
          callback(
            null,
            usable.map((a) => ({ ...a })),
          );
        else callback(null, first.address, first.family);
      },
      (error: unknown) => callback(error instanceof Error ? error : new Error(String(error)), ""),
    );
  };
}

/**
 * The refusal of a URL whose host is an IP literal that is not public, else
 * null. A literal never reaches the lookup (`net.connect` skips it for IP
 * hosts), so it is checked here; names are vetted by the dispatcher's lookup
 * when it connects.
 */
export function literalTargetRefusal(url: URL): RefusedTargetError | null {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host) === 0) return null;
  const why = addressRefusal(host);
  return why === null ? null : new RefusedTargetError(url.hostname, `is ${why}`);
}

export interface OutboundOptions {
  /** The sandbox and tests post to loopback; a deployed worker refuses anything not public. */
  readonly allowPrivateTargets: boolean;
  /**
   * Name resolution; tests inject one (e.g. a rebinding resolver, or dnsResolver pointed at a
   * fake DNS server). Default: dnsResolver() with the system's DNS servers.
   */
  readonly resolve?: Resolver;
  /**
   * Why a resolved address is refused, or null to connect: default addressRefusal. Tests that
   * must stay on loopback name one loopback address "public" to stand in for the internet.
   */
  readonly addressRefusal?: (address: string) => string | null;
}

/** How long a receiver's connection is kept idle for the next delivery to its origin, at most. */
const IDLE_CONNECTION_MS = 4000;

/**
 * undici's own timers off: a delivery lasts as long as its signal allows (the target's
 * `timeoutSeconds`, up to 900 s, or the run's end), which the 300 s defaults would cut short.
 * An idle connection is kept IDLE_CONNECTION_MS at most, whatever the receiver's `Keep-Alive:
 * timeout=N` asks (undici honours up to 600 s): each origin keeps its own, so a tenant with
 * receivers on many ports or names that ask for long could hold a worker's file descriptors
 * (a Lambda has 1,024) until every tenant's deliveries and the worker's own AWS calls failed.
 */
const CLIENT_OPTIONS = {
  headersTimeout: 0,
  bodyTimeout: 0,
  keepAliveTimeout: IDLE_CONNECTION_MS,
  keepAliveMaxTimeout: IDLE_CONNECTION_MS,
} as const;

/**
 * The cipher suites a delivery offers: Node's default less finite-field Diffie-Hellman (DHE) and
 * static RSA, so that the key exchange is elliptic-curve whatever TLS version the receiver picks.
 * A TLS 1.2 server picking DHE names the group itself, of any size up to 10,000 bits (Node bounds
 * it from below only, `minDHSize`), and the worker's half of the exchange, two modular
 * exponentiations of that size, runs on its main thread before the certificate is judged: two
 * such deliveries held the event loop, which runs every tenant's runs, heartbeats and polls, for
 * 3 s. Every current server offers ECDHE; static RSA is left out too, having no forward secrecy.
 */
const DELIVERY_CIPHERS = [
  // TLS 1.3: its key exchange is DELIVERY_GROUPS'.
  "TLS_AES_256_GCM_SHA384",
  "TLS_CHACHA20_POLY1305_SHA256",
  "TLS_AES_128_GCM_SHA256",
  "ECDHE-RSA-AES128-GCM-SHA256",
  "ECDHE-ECDSA-AES128-GCM-SHA256",
  "ECDHE-RSA-AES256-GCM-SHA384",
  "ECDHE-ECDSA-AES256-GCM-SHA384",
  "ECDHE-RSA-CHACHA20-POLY1305",
  "ECDHE-ECDSA-CHACHA20-POLY1305",
  "ECDHE-RSA-AES128-SHA256",
  "ECDHE-ECDSA-AES128-SHA256",
  "ECDHE-RSA-AES256-SHA384",
  "ECDHE-ECDSA-AES256-SHA384",
  "ECDHE-RSA-AES128-SHA",
  "ECDHE-ECDSA-AES128-SHA",
  "ECDHE-RSA-AES256-SHA",
  "ECDHE-ECDSA-AES256-SHA",
].join(":");

/**
 * The key-exchange groups a delivery offers (`ecdhCurve`, OpenSSL's groups list): elliptic curves
 * only, so that a TLS 1.3 receiver cannot pick an ffdhe group either (ffdhe8192 cost the worker's
 * main thread about 61 ms a handshake). P-521 (about 12 ms) is among them: TLS 1.2 holds an ECDSA
 * certificate's curve to the groups the client offers, so without it a receiver whose certificate
 * is on P-521 failed at the handshake whatever key exchange it took.
 */
const DELIVERY_GROUPS = "X25519:P-256:P-384:P-521";

/**
 * What every delivery's TLS client offers; certificates are verified as Node does by default. No
 * renegotiation (TLS 1.2): no receiver needs it, and each is a full handshake on the worker's main
 * thread; one renegotiating without end made thousands a delivery (4,262 before the 1 MiB limit cut
 * it, 1.1 s of the worker's CPU).
 */
export const DELIVERY_TLS_OPTIONS = {
  ciphers: DELIVERY_CIPHERS,
  ecdhCurve: DELIVERY_GROUPS,
  secureOptions: constants.SSL_OP_NO_RENEGOTIATION,
} as const;

/**
 * The connection pool webhook deliveries go through. Every connection, the sandbox's too, is
 * metered: a receiver sending more than MAX_RECEIVED_BYTES for one delivery has it closed.
 */
export function outboundDispatcher(options: OutboundOptions): Dispatcher {
  if (options.allowPrivateTargets)
    return new Agent({ ...CLIENT_OPTIONS, connect: meteredConnector({ ...DELIVERY_TLS_OPTIONS }) });
  const lookup = vettedLookup(
    options.resolve ?? defaultResolver,
    options.addressRefusal ?? addressRefusal,
  );
  return new Agent({
    ...CLIENT_OPTIONS,
    connect: meteredConnector({ ...DELIVERY_TLS_OPTIONS, lookup }),
  });
}

/**
 * `dispatcher`'s connections, each request through it aborted when `signal` aborts, at its
 * connection: fetch aborts a request through a signal of its Request's own, which follows the one
 * it is given through a WeakRef (undici's Request), so the abort can be lost when that Request is
 * collected mid-flight. A receiver that never answered then kept its connection open for good
 * (undici's headers timeout is off, CLIENT_OPTIONS), a file descriptor of the worker per delivery.
 * Here the signal holds the listener that aborts, and the listener the request's controller, until
 * the request ends: kept longer, it would keep the whole fetch, since undici's FinalizationRegistry
 * holds the signal for as long as the fetch's Request lives, which that fetch keeps alive.
 */
export function abortedBy(dispatcher: Dispatcher, signal: AbortSignal): Dispatcher {
  return dispatcher.compose((dispatch) => (options, handler) => {
    let unfollow: () => void = () => undefined;
    const ended = () => {
      unfollow();
      unfollow = () => undefined;
    };
    return dispatch(options, {
      onRequestStart(controller, context) {
        ended();
        handler.onRequestStart?.(controller, context);
        if (controller.aborted) return;
        if (signal.aborted) return controller.abort(signal.reason);
        const abort = () => controller.abort(signal.reason);
        signal.addEventListener("abort", abort, { once: true });
        unfollow = () => signal.removeEventListener("abort", abort);
      },
      onRequestUpgrade(controller, statusCode, headers, socket) {
        ended();
        handler.onRequestUpgrade?.(controller, statusCode, headers, socket);
      },
      onResponseStart: (controller, statusCode, headers, statusMessage) =>
        handler.onResponseStart?.(controller, statusCode, headers, statusMessage),
      onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
      onResponseEnd(controller, trailers) {
        ended();
        handler.onResponseEnd?.(controller, trailers);
      },
      onResponseError(controller, error) {
        ended();
        handler.onResponseError?.(controller, error);
      },
    });
  });
}

/** The RefusedTargetError somewhere in an error's cause chain (fetch wraps connection failures). */
export function refusalIn(error: unknown): RefusedTargetError | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof RefusedTargetError) return current;
    current = current.cause;
  }
  return undefined;
}
