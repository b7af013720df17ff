import type { Middleware } from "openapi-fetch";
import { callerSignalOf, RequestWithSignal } from "./caller-signal.js";
import { type SigV4Options, sigV4Signer } from "./sigv4.js";

/**
 * How the client authenticates: a bearer key (the sandbox's SCHEDULER_API_KEYS,
 * or an access token for a stack deployed with the JWT option), SigV4 for a
 * stack's IAM-authorized API (credentials from the AWS SDK's default chain
 * unless given), or nothing (GET /health and GET /openapi.json need none).
 */
export type ClientAuth =
  | { readonly kind: "bearer"; readonly key: string }
  | ({ readonly kind: "sigv4" } & SigV4Options)
  | { readonly kind: "none" };

/**
 * Why a bearer key cannot be sent, or null. The API takes a key of visible ASCII without spaces,
 * and fetch refuses a header with a line break, another control character or one beyond U+00FF,
 * quoting it whole, key included (or fails as if the API were down): so the problem is named here,
 * without the key. Whitespace around it (a line ending read from a file) is dropped, as fetch did.
 */
export function bearerKeyProblem(key: string): string | null {
  const trimmed = key.trim();
  if (trimmed === "") return "the bearer key is empty";
  const at = trimmed.search(/[^\x21-\x7E]/);
  if (at === -1) return null;
  const position = key.length - key.trimStart().length + at + 1;
  return `character ${position} of the bearer key is a space, a control character or not ASCII; a key is visible ASCII characters (the key is not shown)`;
}

/**
 * The middleware that authenticates every request the client sends with a bearer key (none for
 * SigV4, whose signature is made for each attempt: signedAttempts).
 */
export function authMiddleware(auth: ClientAuth): Middleware {
  if (auth.kind !== "bearer") return { onRequest: () => undefined };
  const problem = bearerKeyProblem(auth.key);
  if (problem !== null) throw new RangeError(`auth.key: ${problem}`);
  const key = auth.key.trim();
  return {
    onRequest({ request }) {
      request.headers.set("Authorization", `Bearer ${key}`);
      return request;
    },
  };
}

/**
 * `fetch` for each attempt of a request, below the client's retries: with SigV4, the attempt signed
 * at the time it is sent (`now`). A signature holds for 5 minutes from its X-Amz-Date, and a retry
 * may come later than that after the first attempt (a long timeoutMs that ran out, a Retry-After):
 * signed once, in a middleware above the retries, the retry was sent with the first attempt's
 * signature and refused 403. With any other auth, `base` itself.
 */
export function signedAttempts(
  auth: ClientAuth,
  baseUrl: string,
  base: typeof fetch,
): typeof fetch {
  if (auth.kind !== "sigv4") return base;
  const sign = sigV4Signer(auth, new URL(baseUrl));
  return async (input, init) => {
    const caller = callerSignalOf(input, init);
    const request = new Request(input, { ...init, signal: null });
    const body = request.body === null ? undefined : await request.text();
    const url = new URL(request.url);
    const headers: Record<string, string> = {};
    request.headers.forEach((value, name) => {
      headers[name] = value;
    });
    const signed = await sign({ url, method: request.method, headers, body });
    // The caller's signal itself, not the request's, which follows it only weakly.
    const attempt = new RequestWithSignal(url, {
      method: request.method,
      headers: signed,
      ...(body === undefined ? {} : { body }),
      signal: caller,
    });
    // With a Request, `init` holds only what is not part of one (openapi-fetch's requestInitExt).
    return base(attempt, input instanceof Request ? init : { signal: caller });
  };
}
