import type { Socket } from "node:net";
import { buildConnector } from "undici";

/**
 * The most a receiver may send the worker for one delivery: 1 MiB, everything read from the
 * connection (a TLS connection's decrypted bytes) from the request's first byte written to the
 * next request's: status lines and headers, interim (1xx) answers, chunk framing and extensions,
 * and the answer's body. The handler reads 64 KiB of a body and undici 16 KiB of a head, but its
 * parser puts no bound on chunk extensions or on the number of 1xx answers, so a receiver could
 * stream gigabytes that no cap above the socket ever sees, a core of the worker (which runs other
 * tenants' runs beside this one) busy parsing them until the delivery's timeout.
 */
export const MAX_RECEIVED_BYTES = 1024 * 1024;

/** What destroys a connection whose receiver sent more than MAX_RECEIVED_BYTES for one delivery. */
class ReceivedTooMuchError extends Error {
  override readonly name = "ReceivedTooMuchError";

  constructor(limit: number) {
    super(`receiver sent more than ${limit} bytes for one delivery; connection closed`);
  }
}

/** The ReceivedTooMuchError somewhere in an error's cause chain (fetch wraps a socket's error). */
export function receivedTooMuchIn(error: unknown): ReceivedTooMuchError | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof ReceivedTooMuchError) return current;
    current = current.cause;
  }
  return undefined;
}

/**
 * Counts what the socket receives, as the stream pushes it (before undici's parser reads it), and
 * destroys the socket with a ReceivedTooMuchError once more than `limit` bytes came in since the
 * worker last wrote to it. A kept-alive connection carries one delivery at a time (undici's
 * pipelining is 1) and each starts by writing its request, so the count is per delivery: a
 * connection reused for many small answers is not cut off. A receiver cannot make the worker
 * write. The bytes past the limit are never pushed, so the parser never sees them. The socket's
 * own `push` (which Node calls with each read, a TLS socket's decrypted) is wrapped rather than a
 * 'data' listener added: a listener would see bytes only as undici reads them and would meddle
 * with the flowing mode its 'readable' reads rely on.
 */
function meterReceived(socket: Socket, limit: number): void {
  const push = socket.push.bind(socket);
  let received = 0;
  let writtenAt = socket.bytesWritten;
  socket.push = (chunk: unknown, encoding?: BufferEncoding): boolean => {
    if (chunk === null || socket.destroyed) return push(chunk, encoding);
    if (socket.bytesWritten !== writtenAt) {
      writtenAt = socket.bytesWritten;
      received = 0;
    }
    received += Buffer.isBuffer(chunk) ? chunk.byteLength : String(chunk).length;
    if (received <= limit) return push(chunk, encoding);
    socket.destroy(new ReceivedTooMuchError(limit));
    return false;
  };
}

/**
 * undici's own connector (`buildConnector`, its documented hook for checks on a new socket) with
 * every socket it opens, plain or TLS, metered by meterReceived.
 */
export function meteredConnector(
  options: buildConnector.BuildOptions,
  limit: number = MAX_RECEIVED_BYTES,
): buildConnector.connector {
  const connect = buildConnector(options);
  return (connectOptions, callback) =>
    connect(connectOptions, (...args) => {
      const [error, socket] = args;
      if (error === null) meterReceived(socket, limit);
      callback(...args);
    });
}
