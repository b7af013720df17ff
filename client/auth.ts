import type { Middleware } from "openapi-fetch";
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

/** The middleware that authenticates every request the client sends. */
export function authMiddleware(auth: ClientAuth, baseUrl: string): Middleware {
  switch (auth.kind) {
    case "none":
      return { onRequest: () => undefined };
    case "bearer":
      return {
        onRequest({ request }) {
          request.headers.set("Authorization", `Bearer ${auth.key}`);
          return request;
        },
      };
    case "sigv4": {
      const sign = sigV4Signer(auth, new URL(baseUrl));
      return {
        async onRequest({ request }) {
          const body = request.body === null ? undefined : await request.clone().text();
          const url = new URL(request.url);
          const headers: Record<string, string> = {};
          request.headers.forEach((value, name) => {
            headers[name] = value;
          });
          const signed = await sign({ url, method: request.method, headers, body });
          return new Request(url, {
            method: request.method,
            headers: signed,
            ...(body === undefined ? {} : { body }),
            signal: request.signal,
          });
        },
      };
    }
  }
}
