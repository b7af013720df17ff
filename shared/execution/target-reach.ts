import { isIP } from "node:net";

/**
 * Targets no delivery can reach, whatever the receiver: the API refuses them at create and edit
 * (400 `target.url`), and the worker refuses one stored before without a retry, since every
 * attempt would fail alike. Where a delivery may connect at all is ./outbound.ts.
 */

/**
 * The ports fetch never connects to: the Fetch standard's "bad ports" (SMTP, IRC, X11, …), which
 * undici's fetch, the one every webhook delivery goes through, fails before connecting ("bad
 * port"). test/unit/target-ports holds the list to undici's, which its package does not export.
 */
export const FETCH_BLOCKED_PORTS: ReadonlySet<string> = new Set(
  [
    "1 7 9 11 13 15 17 19 20 21 22 23 25 37 42 43 53 69 77 79 87 95 101 102 103 104 109 110 111",
    "113 115 117 119 123 135 137 139 143 161 179 389 427 465 512 513 514 515 526 530 531 532 540",
    "548 554 556 563 587 601 636 989 990 993 995 1719 1720 1723 2049 3659 4045 4190 5060 5061",
    "6000 6566 6665 6666 6667 6668 6669 6679 6697 10080",
  ]
    .join(" ")
    .split(" "),
);

/** RFC 1035's bounds on a name as text: labels of 1 to 63 characters, 253 in all. */
const MAX_LABEL_CHARS = 63;
const MAX_NAME_CHARS = 253;
export const DNS_NAME_RULE = `labels of 1 to ${MAX_LABEL_CHARS} characters, ${MAX_NAME_CHARS} in all`;

/**
 * Whether a URL's host (as the URL parser leaves it: IDNA's ASCII, IPv6 in brackets) is an IP
 * literal or a name DNS can be asked for. The URL parser takes hosts DNS cannot hold (a label of
 * 64 characters, an empty one: `a..b`), which the resolver refuses before asking (EBADNAME), on
 * every attempt. A trailing dot (the root) is a name's own.
 */
export function isResolvableHost(hostname: string): boolean {
  if (isIP(hostname.replace(/^\[|\]$/g, "")) !== 0) return true;
  const name = hostname.endsWith(".") ? hostname.slice(0, -1) : hostname;
  return (
    name.length > 0 &&
    name.length <= MAX_NAME_CHARS &&
    name.split(".").every((label) => label.length > 0 && label.length <= MAX_LABEL_CHARS)
  );
}

/**
 * Headers that belong to the connection, not the request: the delivery's HTTP client (undici)
 * sets them itself or refuses to send them ("invalid upgrade header", "expect header not
 * supported"), so a target naming one would fail every attempt of every run. Lower case.
 */
export const CONNECTION_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "content-length",
  "expect",
  "keep-alive",
  "transfer-encoding",
  "upgrade",
]);
