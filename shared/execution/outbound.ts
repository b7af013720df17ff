import type { LookupAddress } from "node:dns";
import { lookup as systemLookup } from "node:dns/promises";
import { isIP, type LookupFunction } from "node:net";
import ipaddr from "ipaddr.js";
import { Agent, type Dispatcher } from "undici";
import { SchedulerError } from "../errors.js";

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

const systemResolver: Resolver = (hostname) =>
  systemLookup(hostname, { all: true, verbatim: true });

declare module "../errors.js" {
  interface ErrorContexts {
    /** A webhook target the worker will not connect to (not a public unicast address). */
    readonly target_refused: { readonly hostname: string };
  }
}

/** A target the worker will not connect to; delivering to it again cannot succeed. */
export class RefusedTargetError extends SchedulerError<"target_refused"> {
  override readonly name = "RefusedTargetError";

  constructor(hostname: string, why: string) {
    super("target_refused", `target ${hostname} ${why}; refused`, { hostname });
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
            callback(new RefusedTargetError(hostname, `resolves to ${address} (${why})`), "");
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
  /** Name resolution; tests inject one (e.g. a rebinding resolver). Default: the system's. */
  readonly resolve?: Resolver;
  /**
   * Why a resolved address is refused, or null to connect: default addressRefusal. Tests that
   * must stay on loopback name one loopback address "public" to stand in for the internet.
   */
  readonly addressRefusal?: (address: string) => string | null;
}

/**
 * undici's own timers off: a delivery lasts as long as its signal allows (the target's
 * `timeoutSeconds`, up to 900 s, or the run's end), which the 300 s defaults would cut short.
 */
const NO_CLIENT_TIMEOUTS = { headersTimeout: 0, bodyTimeout: 0 } as const;

/** The connection pool webhook deliveries go through. */
export function outboundDispatcher(options: OutboundOptions): Dispatcher {
  if (options.allowPrivateTargets) return new Agent(NO_CLIENT_TIMEOUTS);
  const lookup = vettedLookup(
    options.resolve ?? systemResolver,
    options.addressRefusal ?? addressRefusal,
  );
  return new Agent({ ...NO_CLIENT_TIMEOUTS, connect: { lookup } });
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
