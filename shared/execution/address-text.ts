import { isIP } from "node:net";

/**
 * A run of the characters a host, an IP address, a label before one (`IP Address:`) or a port is
 * written in. One character class repeated: matched in time linear in the text, whatever it holds.
 */
const TOKEN = /[0-9A-Za-z:.%[\]_-]+/g;
/**
 * Longer than any address with its label, zone and port: left as it is, so that a long run of
 * colons costs one look, not one per colon.
 */
const LONGEST_TOKEN = 100;
/** An address in brackets (IPv6), the port after it if any. */
const BRACKETED = /^\[([^\]]+)\](:\d+)?$/;
/** A text and the last port after it. */
const LAST_PORT = /^(.+):\d+$/;

/**
 * `text` with each IP address in it told as `host`: a port after it kept, a label before it
 * (`IP Address:`) kept. Texts a failed connection makes (Node's `connect ECONNREFUSED
 * 203.0.113.7:443`, undici's connect timeout's attempted addresses, a certificate's altnames) name
 * the addresses the worker's resolver answered for `host`, which the tenant must not learn (see
 * RefusedTargetError). An address is a whole token or a token's end after a colon, so a name that
 * holds a dotted quad (`10.9.8.7.nip.io`, `1.2.3.4-svc.example`) is no address and stays as it is.
 */
export function addressesAs(host: string, text: string): string {
  return text.replace(TOKEN, (token) =>
    token.length > LONGEST_TOKEN ? token : (tokenAs(host, token) ?? token),
  );
}

/** The token with the address it holds or ends with as `host`, or null when it holds none. */
function tokenAs(host: string, token: string): string | null {
  let start = 0;
  for (;;) {
    const told = addressAs(host, token.slice(start));
    if (told !== null) return `${token.slice(0, start)}${told}`;
    const colon = token.indexOf(":", start);
    if (colon < 0) return null;
    start = colon + 1;
  }
}

/** `text`, an address alone or with its port, as `host` (the port kept), or null. */
function addressAs(host: string, text: string): string | null {
  if (isIP(text) !== 0) return host;
  const bracketed = BRACKETED.exec(text);
  if (bracketed?.[1] !== undefined && isIP(bracketed[1]) === 6)
    return `${host}${bracketed[2] ?? ""}`;
  // Ports taken off one at a time from the end (`203.0.113.7:443`, `::1:443`, `203.0.113.7:443:1`).
  for (let rest = LAST_PORT.exec(text)?.[1]; rest !== undefined; rest = LAST_PORT.exec(rest)?.[1])
    if (isIP(rest) !== 0) return `${host}${text.slice(rest.length)}`;
  return null;
}
