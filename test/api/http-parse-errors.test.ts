import { maxHeaderSize } from "node:http";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { type ApiHarness, startApi } from "./support.js";

/**
 * What the local server (the sandbox's API) answers a request Node's HTTP parser refuses before
 * any route sees it: headers past Node's limit, a request line that is no HTTP. Node's own answers
 * are a bare status line with no body; the server answers them in the API's one error shape.
 */
let api: ApiHarness;

beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

interface RawAnswer {
  readonly statusLine: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** Sends `request` as bytes on a new connection and reads the answer until the server closes it. */
function sendRaw(request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(api.server.url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const [head = "", ...rest] = text.split("\r\n\r\n");
      const [statusLine = "", ...lines] = head.split("\r\n");
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(":");
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      resolve({ statusLine, headers, body: rest.join("\r\n\r\n") });
    });
    socket.write(request);
  });
}

/** The answer is `status` in the API's error shape, with `code`; returns its message. */
function expectErrorShape(answer: RawAnswer, status: number, code: string): string {
  expect(answer.statusLine, answer.body).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
  expect(answer.headers["content-type"]).toBe("application/json");
  expect(answer.headers["cache-control"]).toBe("no-store");
  expect(answer.headers.connection).toBe("close");
  expect(Number(answer.headers["content-length"])).toBe(Buffer.byteLength(answer.body, "utf8"));
  const { error } = ErrorSchema.parse(JSON.parse(answer.body));
  expect(error.code).toBe(code);
  return error.message;
}

describe("requests Node's HTTP parser refuses", () => {
  it("headers over Node's limit: 431 in the error shape, naming the limit", async () => {
    const answer = await sendRaw(
      `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${"a".repeat(maxHeaderSize + 1)}\r\n\r\n`,
    );
    const message = expectErrorShape(answer, 431, "conflict");
    expect(message).toBe(
      `the request's headers are over the ${maxHeaderSize} bytes this server reads; send smaller ones`,
    );
  });

  it("a request line that is no HTTP: 400 in the error shape", async () => {
    const answer = await sendRaw("THIS IS NOT HTTP\r\n\r\n");
    const message = expectErrorShape(answer, 400, "validation_failed");
    expect(message).toMatch(/^the request is not HTTP\/1\.1 the server can read: /);
  });

  it("a header line that is malformed: 400 in the error shape", async () => {
    const answer = await sendRaw(
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",
    );
    expectErrorShape(answer, 400, "validation_failed");
  });

  it("a well-formed request on the same server is answered as before", async () => {
    const answer = await sendRaw(
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    expect(answer.statusLine).toBe("HTTP/1.1 200 OK");
    expect(JSON.parse(answer.body)).toEqual({ status: "ok" });
  });
});
