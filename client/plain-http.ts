import ipaddr from "ipaddr.js";

/**
 * Where a bearer key may go over plain http: the CLI's rule (client/cli/context.ts), which the
 * console's key sign-in keeps too (console/pages/sign-in.tsx). Its own module, importing nothing
 * of the client's auth (the AWS SDK's signing), so the console's bundle takes it alone.
 */

/** `localhost`, or an address in 127.0.0.0/8 or ::1 (IPv4-mapped too), as URL's hostname spells it. */
export function isLoopback(hostname: string): boolean {
  if (hostname === "localhost") return true;
  const literal = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  return ipaddr.isValid(literal) && ipaddr.process(literal).range() === "loopback";
}

/**
 * Why a bearer key is not sent to `url`, or null. Over plain http it is readable by anyone on the
 * way (and kept by any proxy's log), and a key is the tenant's: so only to a loopback host (the
 * sandbox, where nothing is on the way).
 */
export function plainHttpKeyProblem(url: URL): string | null {
  if (url.protocol !== "http:" || isLoopback(url.hostname)) return null;
  return `a bearer key is not sent over ${url.protocol} to ${url.host}, where anyone on the way can read it`;
}
