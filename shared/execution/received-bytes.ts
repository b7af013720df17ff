import { type LookupFunction, Socket } from "node:net";
import { buildConnector } from "undici";

/**
 * The most a receiver may send the worker for one delivery: 1 MiB, every byte received on the
 * connection from the request's first byte written to the next request's (and before the first
 * request, since the connection opened): status lines and headers, interim (1xx) answers, chunk
 * framing and extensions, and the answer's body, and over TLS every record as it came off the
 * wire (the handshake, session tickets and other post-handshake messages, record headers and
 * authentication tags). The handler reads 64 KiB of
 * a body and undici 16 KiB of a head, but its parser puts no bound on chunk extensions or on the
 * number of 1xx answers, nor TLS 1.3 on the session tickets a server sends, so a receiver could
 * stream gigabytes that no cap above the socket ever sees, a core of the worker (which runs other
 * tenants' runs beside this one) busy parsing or decrypting them until the delivery's timeout.
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
 * Counts what the socket receives, as the stream pushes it (before undici's parser or OpenSSL
 * reads it), and destroys the socket with a ReceivedTooMuchError once more than `limit` bytes
 * came in since the worker last wrote a request: `written` is how much it wrote, the socket's own
 * `bytesWritten` for plain HTTP, the TLS socket's (plaintext, so a TLS 1.3 KeyUpdate the receiver
 * asks the worker to answer starts no new count) over TLS. A kept-alive connection carries one
 * delivery at a time (undici's pipelining is 1) and each starts by writing its request, so the
 * count is per delivery: a connection reused for many small answers is not cut off. The bytes
 * past the limit are never pushed, so nothing above reads them. The socket's own `push` (which
 * Node calls with each read) is wrapped rather than a 'data' listener added: a listener would see
 * bytes only as they are read and would meddle with the flowing mode undici's 'readable' reads
 * rely on.
 */
function meterReceived(
  socket: Socket,
  limit: number,
  written: () => number = () => socket.bytesWritten,
): void {
  const push = socket.push.bind(socket);
  let received = 0;
  let writtenAt = written();
  socket.push = (chunk: unknown, encoding?: BufferEncoding): boolean => {
    if (chunk === null || socket.destroyed) return push(chunk, encoding);
    if (written() !== writtenAt) {
      writtenAt = written();
      received = 0;
    }
    received += Buffer.isBuffer(chunk) ? chunk.byteLength : String(chunk).length;
    if (received <= limit) return push(chunk, encoding);
    socket.destroy(new ReceivedTooMuchError(limit));
    return false;
  };
}

/** undici's TCP keep-alive for the sockets it opens (`buildConnector`'s default). */
const KEEP_ALIVE_INITIAL_DELAY_MS = 60_000;

/** buildConnector's options, with the `lookup` every TCP connection resolves its name with. */
export type MeteredConnectorOptions = buildConnector.BuildOptions & {
  readonly lookup?: LookupFunction;
};

/**
 * undici's own connector (`buildConnector`, its documented hook for checks on a new socket) with
 * every connection metered by meterReceived on the bytes it receives from the network. A plain
 * socket's reads are those bytes. A TLS socket's reads are what OpenSSL decrypted, and OpenSSL
 * consumes handshake and post-handshake messages (TLS 1.3's session tickets, without end if the
 * receiver likes) unseen; so over TLS the TCP socket is made here, metered, and handed to
 * buildConnector to wrap (its `httpSocket`). It is handed over before it connects: Node then
 * wraps it as a stream (JSStreamSocket) and OpenSSL reads what the socket pushes, where a
 * connected socket's handle would be read by OpenSSL directly, past the meter. It connects to
 * the URL's host with `options.lookup`, as buildConnector's own socket did, so a deployed
 * worker's socket connects to an address the vetted lookup answered and no other.
 */
export function meteredConnector(
  options: MeteredConnectorOptions,
  limit: number = MAX_RECEIVED_BYTES,
): buildConnector.connector {
  const connect = buildConnector(options);
  return (connectOptions, callback) => {
    if (connectOptions.protocol !== "https:") {
      connect(connectOptions, (...args) => {
        const [error, socket] = args;
        if (error === null) meterReceived(socket, limit);
        callback(...args);
      });
      return;
    }
    const tcp = new Socket();
    // What undici wrote through the TLS socket, known once it is connected (0 until then).
    let tls: Socket | undefined;
    meterReceived(tcp, limit, () => tls?.bytesWritten ?? 0);
    connect({ ...connectOptions, httpSocket: tcp }, (...args) => {
      if (args[0] === null) tls = args[1];
      callback(...args);
    });
    // buildConnector sets these on the TLS socket, which passes them to no stream-wrapped socket.
    tcp.setNoDelay(true).setKeepAlive(true, KEEP_ALIVE_INITIAL_DELAY_MS);
    const { hostname, port, localAddress } = connectOptions;
    tcp.connect({
      host: hostname,
      // A URL's own port, as undici's connector takes it (port 0 too, which fails); 443 when none.
      port: Number(port || 443),
      ...(options.lookup ? { lookup: options.lookup } : {}),
      ...(localAddress ? { localAddress } : {}),
    });
  };
}
