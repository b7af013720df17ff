type FetchInput = Parameters<typeof fetch>[0];
type FetchInit = Parameters<typeof fetch>[1];

/** The signal each RequestWithSignal was made with (null: none), for as long as it lives. */
const signalsGiven = new WeakMap<Request, AbortSignal | null>();

/**
 * A Request that keeps the signal it was made with, the caller's. A Request's own `signal` follows
 * that one only through a controller Node 20's fetch (undici) holds weakly, kept by that Request
 * alone (a clone's by nothing at all): once the Request is no longer held, a garbage collection
 * drops the controller and the caller's abort with it. The client makes its requests with this
 * class (openapi-fetch's `Request` option), and its fetch layers listen to the caller's signal
 * itself (callerSignalOf) rather than to a Request's.
 */
export class RequestWithSignal extends Request {
  constructor(input: FetchInput, init?: FetchInit) {
    super(input, init);
    signalsGiven.set(this, callerSignalOf(input, init));
  }

  /**
   * Any Request: openapi-fetch takes a middleware's new Request only when it is an instance of the
   * class it makes them with, and a middleware of the caller's (`client.http.use`) makes a plain
   * one, as it did with openapi-fetch's default.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof Request;
  }
}

/**
 * The signal a caller gave fetch, or null for none: `init`'s (null there says none), else the one
 * its RequestWithSignal was made with; another Request's own signal at worst.
 */
export function callerSignalOf(input: FetchInput, init: FetchInit): AbortSignal | null {
  if (init?.signal !== undefined) return init.signal;
  if (!(input instanceof Request)) return null;
  const given = signalsGiven.get(input);
  return given === undefined ? input.signal : given;
}
