import { execFile } from "node:child_process";
import { createHash, createHmac } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { SchedulerClient } from "../../client/index.js";
import { regionOfHost, signingRegion } from "../../client/sigv4.js";
import { apiClient, authModeFromEnv } from "../support/api-client.js";

/**
 * The e2e client's SigV4 signing, checked against an independent
 * implementation of the algorithm written here with node:crypto (canonical
 * request, string to sign, derived key), on what a local HTTP server actually
 * received: so the method, path, query, body and Host that went over the wire
 * are the ones that were signed. The reference implementation is itself
 * pinned to AWS's published test-suite vectors first.
 */

interface Captured {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * Every request's answer: the fields the client checks in a job and in a page (answers.ts), so that
 * the edit, the listing and `jobs get` succeed and the test reads what was signed.
 */
const ANSWER = { id: "01J0ABC", status: "active", version: 3, items: [], nextCursor: null };

let server: Server;
let origin: string;
let captured: Captured[] = [];
/** The statuses of the next answers, in turn (then 200); a 503 asks to wait 360 s (Retry-After). */
let statuses: number[] = [];

beforeAll(async () => {
  server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      captured.push({
        method: request.method ?? "",
        url: request.url ?? "",
        headers: request.headers,
        body: Buffer.concat(chunks),
      });
      const status = statuses.shift() ?? 200;
      response.writeHead(status, {
        "content-type": "application/json",
        ...(status === 503 ? { "retry-after": "360" } : {}),
      });
      response.end(JSON.stringify(status === 200 ? ANSWER : { error: { code: "busy" } }));
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((done, fail) => server.close((error) => (error ? fail(error) : done())));
});

beforeEach(() => {
  captured = [];
  statuses = [];
});

function only(): Captured {
  expect(captured).toHaveLength(1);
  const [request] = captured;
  if (!request) throw new Error("the server received nothing");
  return request;
}

// ---------------------------------------------------------------- the reference SigV4

const sha256Hex = (data: string | Buffer) => createHash("sha256").update(data).digest("hex");
const hmac = (key: string | Buffer, data: string) =>
  createHmac("sha256", key).update(data).digest();

/** RFC 3986 unreserved characters stay; everything else is %XX of its UTF-8 bytes, upper case. */
function uriEncode(value: string): string {
  let out = "";
  for (const byte of Buffer.from(value, "utf8")) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9\-._~]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** Each segment of the path as received (encoded once) encoded again: every service but S3. */
function canonicalUri(rawPath: string): string {
  return rawPath
    .split("/")
    .map((segment) => uriEncode(segment))
    .join("/");
}

function canonicalQuery(rawQuery: string): string {
  if (rawQuery === "") return "";
  const decode = (s: string) => decodeURIComponent(s.replace(/\+/g, " "));
  return rawQuery
    .split("&")
    .map((pair) => {
      const at = pair.indexOf("=");
      const [key, value] = at < 0 ? [pair, ""] : [pair.slice(0, at), pair.slice(at + 1)];
      return [uriEncode(decode(key)), uriEncode(decode(value))] as const;
    })
    .sort(([ka, va], [kb, vb]) => (ka < kb ? -1 : ka > kb ? 1 : va < vb ? -1 : va > vb ? 1 : 0))
    .map(([key, value]) => `${key}=${value}`)
    .join("&");
}

interface Reference {
  method: string;
  rawPath: string;
  rawQuery: string;
  /** Lower-case name → value, exactly the headers to sign. */
  headers: Record<string, string>;
  body: Buffer;
  amzDate: string;
  region: string;
  service: string;
  secretAccessKey: string;
}

function referenceSignature(r: Reference): { signedHeaders: string; signature: string } {
  const names = Object.keys(r.headers).sort();
  const canonicalHeaders = names
    .map((name) => `${name}:${(r.headers[name] ?? "").trim().replace(/\s+/g, " ")}\n`)
    .join("");
  const signedHeaders = names.join(";");
  const canonicalRequest = [
    r.method,
    canonicalUri(r.rawPath),
    canonicalQuery(r.rawQuery),
    canonicalHeaders,
    signedHeaders,
    sha256Hex(r.body),
  ].join("\n");
  const day = r.amzDate.slice(0, 8);
  const scope = `${day}/${r.region}/${r.service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", r.amzDate, scope, sha256Hex(canonicalRequest)].join(
    "\n",
  );
  const kDate = hmac(`AWS4${r.secretAccessKey}`, day);
  const kRegion = hmac(kDate, r.region);
  const kService = hmac(kRegion, r.service);
  const kSigning = hmac(kService, "aws4_request");
  return {
    signedHeaders,
    signature: createHmac("sha256", kSigning).update(stringToSign).digest("hex"),
  };
}

const AUTHORIZATION =
  /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/;

// AWS's SigV4 test suite credentials and date.
const ACCESS_KEY = "AKIDEXAMPLE";
const SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const SIGNING_DATE = new Date("2015-08-30T12:36:00Z");
const AMZ_DATE = "20150830T123600Z";

describe("the reference implementation", () => {
  const vanilla = {
    method: "GET",
    rawPath: "/",
    headers: { host: "example.amazonaws.com", "x-amz-date": AMZ_DATE },
    body: Buffer.alloc(0),
    amzDate: AMZ_DATE,
    region: "us-east-1",
    service: "service",
    secretAccessKey: SECRET_KEY,
  };

  it("reproduces AWS's get-vanilla vector", () => {
    expect(referenceSignature({ ...vanilla, rawQuery: "" })).toEqual({
      signedHeaders: "host;x-amz-date",
      signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
    });
  });

  it("reproduces AWS's get-vanilla-query-order-key-case vector (the query is sorted)", () => {
    expect(referenceSignature({ ...vanilla, rawQuery: "Param2=value2&Param1=value1" })).toEqual({
      signedHeaders: "host;x-amz-date",
      signature: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
    });
  });
});

// ---------------------------------------------------------------- the client

describe("apiClient with IAM auth", () => {
  const credentials = {
    accessKeyId: ACCESS_KEY,
    secretAccessKey: SECRET_KEY,
    sessionToken: "session-token-example",
  };
  const iam = { kind: "iam", region: "eu-west-1", credentials, now: () => SIGNING_DATE } as const;

  it("signs method, path, sorted query, JSON body and Host as they went over the wire", async () => {
    // A base URL with a path (a stage, or a custom domain's mapping) and a trailing slash.
    const api = apiClient(`${origin}/v1/`, iam);
    const cursor = "a/b+c= d*'";
    const body = { name: "spike ünïcode", schedule: { runAt: "2030-01-15T09:00:00Z" } };
    const response = await api<typeof ANSWER>(
      "POST",
      `/jobs/01J0ABC/runs?limit=3&cursor=${encodeURIComponent(cursor)}&after=2030&limit=1`,
      body,
      { "If-Match": '"1"' },
    );
    expect(response).toMatchObject({ status: 200, body: ANSWER });

    const sent = only();
    expect(sent.method).toBe("POST");
    expect(sent.body.toString("utf8")).toBe(JSON.stringify(body));
    expect(sent.headers["content-type"]).toBe("application/json");
    expect(sent.headers["x-amz-date"]).toBe(AMZ_DATE);
    expect(sent.headers["x-amz-security-token"]).toBe("session-token-example");
    expect(sent.headers["x-amz-content-sha256"]).toBeUndefined();
    const [rawPath = "", rawQuery = ""] = sent.url.split("?");
    expect(rawPath).toBe("/v1/jobs/01J0ABC/runs");
    // Every parameter arrives, repeated ones included, and decodes to what was asked for.
    const params = new URLSearchParams(rawQuery);
    expect(params.getAll("limit").sort()).toEqual(["1", "3"]);
    expect(params.get("cursor")).toBe(cursor);
    expect(params.get("after")).toBe("2030");

    const match = AUTHORIZATION.exec(sent.headers.authorization ?? "");
    expect(match, sent.headers.authorization).not.toBeNull();
    const [, accessKey, day, region, service, signedHeaders, signature] = match ?? [];
    expect([accessKey, day, region, service]).toEqual([
      ACCESS_KEY,
      "20150830",
      "eu-west-1",
      "execute-api",
    ]);
    const names = ["content-type", "host", "if-match", "x-amz-date", "x-amz-security-token"];
    expect(signedHeaders).toBe(names.join(";"));
    const headers = Object.fromEntries(names.map((name) => [name, String(sent.headers[name])]));
    expect(headers.host).toBe(new URL(origin).host);

    const signed = {
      method: sent.method,
      rawPath,
      rawQuery,
      headers,
      body: sent.body,
      amzDate: AMZ_DATE,
      region: "eu-west-1",
      service: "execute-api",
      secretAccessKey: SECRET_KEY,
    };
    const expected = referenceSignature(signed);
    expect(signature).toBe(expected.signature);
    // And the signature depends on each part: another body, path, query or host would not verify.
    const variants = [
      { body: Buffer.from(`${JSON.stringify(body)} `) },
      { rawPath: "/v1/jobs/01J0ABD/runs" },
      { rawQuery: rawQuery.replace("limit=1", "limit=2") },
      { headers: { ...headers, host: "127.0.0.1:1" } },
      { method: "PUT" },
    ];
    for (const variant of variants) {
      const other = referenceSignature({ ...signed, ...variant });
      expect(other.signature).not.toBe(signature);
    }
  });

  it("signs a GET without a body as the hash of the empty payload", async () => {
    const api = apiClient(origin, { ...iam, credentials: { ...credentials, sessionToken: "" } });
    await api("GET", "/jobs");
    const sent = only();
    expect(sent.body).toHaveLength(0);
    expect(sent.headers["content-type"]).toBeUndefined();
    expect(sent.headers["x-amz-security-token"]).toBeUndefined();
    const match = AUTHORIZATION.exec(sent.headers.authorization ?? "");
    expect(match?.[5]).toBe("host;x-amz-date");
    const expected = referenceSignature({
      method: "GET",
      rawPath: "/jobs",
      rawQuery: "",
      headers: { host: String(sent.headers.host), "x-amz-date": AMZ_DATE },
      body: Buffer.alloc(0),
      amzDate: AMZ_DATE,
      region: "eu-west-1",
      service: "execute-api",
      secretAccessKey: SECRET_KEY,
    });
    expect(match?.[6]).toBe(expected.signature);
  });
});

describe("SchedulerClient with SigV4", () => {
  const credentials = { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY };
  const client = () =>
    new SchedulerClient({
      baseUrl: `${origin}/v1/`,
      auth: { kind: "sigv4", region: "eu-west-1", credentials, now: () => SIGNING_DATE },
    });

  function verify(sent: Captured, amzDate = AMZ_DATE): void {
    const match = AUTHORIZATION.exec(sent.headers.authorization ?? "");
    expect(match, sent.headers.authorization).not.toBeNull();
    const names = (match?.[5] ?? "").split(";");
    expect(names).toContain("host");
    const headers = Object.fromEntries(names.map((name) => [name, String(sent.headers[name])]));
    const [rawPath = "", rawQuery = ""] = sent.url.split("?");
    const expected = referenceSignature({
      method: sent.method,
      rawPath,
      rawQuery,
      headers,
      body: sent.body,
      amzDate,
      region: "eu-west-1",
      service: "execute-api",
      secretAccessKey: SECRET_KEY,
    });
    expect(match?.[6]).toBe(expected.signature);
  }

  it("signs an edit: path, If-Match, JSON body and Host as they went over the wire", async () => {
    await client().jobs.handle("01J0ABC").edit({ name: "spike ünïcode" }, { version: 3 });
    const sent = only();
    expect(sent.method).toBe("PATCH");
    expect(sent.url).toBe("/v1/jobs/01J0ABC");
    expect(sent.headers["if-match"]).toBe('"3"');
    expect(sent.body.toString("utf8")).toBe(JSON.stringify({ name: "spike ünïcode" }));
    expect(AUTHORIZATION.exec(sent.headers.authorization ?? "")?.[5]).toBe(
      "content-type;host;if-match;x-amz-date",
    );
    verify(sent);
  });

  it("signs each attempt when it is sent: a retry 6 minutes after the first carries its own time", async () => {
    // The clock moves only as the client waits before its retry (the 503's Retry-After: 360 s).
    let now = SIGNING_DATE.getTime();
    const retrying = new SchedulerClient({
      baseUrl: origin,
      auth: { kind: "sigv4", region: "eu-west-1", credentials, now: () => new Date(now) },
      retry: {
        maxDelayMs: 600_000,
        sleep: async (ms) => {
          now += ms;
        },
      },
    });
    statuses = [503];
    await retrying.jobs.get("01J0ABC");
    expect(captured.map((sent) => sent.headers["x-amz-date"])).toEqual([
      AMZ_DATE,
      // SigV4 refuses a signature more than 5 minutes from the time it reaches API Gateway: the
      // first attempt's, sent again, would be a 403.
      "20150830T124200Z",
    ]);
    const [first, retry] = captured;
    if (!first || !retry) throw new Error("the server received no retry");
    verify(first);
    verify(retry, "20150830T124200Z");
  });

  it("signs a create's retry with the same Idempotency-Key and body, and sends a 403 once", async () => {
    let now = SIGNING_DATE.getTime();
    const retrying = new SchedulerClient({
      baseUrl: `${origin}/prefix/v1`,
      auth: { kind: "sigv4", region: "eu-west-1", credentials, now: () => new Date(now) },
      retry: {
        maxDelayMs: 600_000,
        sleep: async (ms) => {
          now -= ms; // a clock that went back between the attempts
        },
      },
    });
    statuses = [503];
    await retrying.jobs.create(
      { type: "noop", schedule: { runAt: "2030-01-01T00:00:00.000Z" } },
      { idempotencyKey: "key-1" },
    );
    const [first, retry] = captured;
    if (!first || !retry) throw new Error("the server received no retry");
    expect(retry.headers["idempotency-key"]).toBe("key-1");
    expect(first.headers["idempotency-key"]).toBe("key-1");
    expect(retry.body.toString("utf8")).toBe(first.body.toString("utf8"));
    expect(retry.url).toBe("/prefix/v1/jobs");
    verify(first);
    verify(retry, "20150830T123000Z");
    captured = [];
    statuses = [403];
    await retrying.jobs.get("01J0ABC").catch(() => undefined);
    expect(captured).toHaveLength(1);
  });

  it("signs a listing's query as sent, cursor characters included", async () => {
    const cursor = "a/b+c= d*'";
    await client().runs.page("01J0ABC", { limit: 3, cursor });
    const sent = only();
    expect(sent.body).toHaveLength(0);
    const params = new URLSearchParams(sent.url.split("?")[1] ?? "");
    expect(params.get("cursor")).toBe(cursor);
    expect(params.get("limit")).toBe("3");
    verify(sent);
  });
});

describe("the CLI with an AWS profile", () => {
  it("signs with the profile's credentials from the default chain (--profile)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "scheduler-cli-aws-"));
    const credentialsFile = join(dir, "credentials");
    await writeFile(
      credentialsFile,
      `[cli-test]\naws_access_key_id = ${ACCESS_KEY}\naws_secret_access_key = ${SECRET_KEY}\n`,
    );
    const { AWS_ACCESS_KEY_ID: _id, AWS_SECRET_ACCESS_KEY: _secret, ...env } = process.env;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        "bin/scheduler.mjs",
        ...["--api", `${origin}/v1`, "--profile", "cli-test", "--region", "eu-west-1"],
        ...["-o", "json", "jobs", "get", "01J0ABC"],
      ],
      {
        cwd: resolve(import.meta.dirname, "../.."),
        env: {
          ...env,
          AWS_SHARED_CREDENTIALS_FILE: credentialsFile,
          AWS_CONFIG_FILE: join(dir, "config"),
          SCHEDULER_API_KEY: "",
        },
      },
    );
    expect(JSON.parse(stdout)).toEqual(ANSWER);
    const sent = only();
    expect(sent.url).toBe("/v1/jobs/01J0ABC");
    const match = AUTHORIZATION.exec(sent.headers.authorization ?? "");
    expect(match?.slice(1, 5)).toEqual([ACCESS_KEY, match?.[2], "eu-west-1", "execute-api"]);
    const names = (match?.[5] ?? "").split(";");
    const amzDate = String(sent.headers["x-amz-date"]);
    const expected = referenceSignature({
      method: "GET",
      rawPath: sent.url,
      rawQuery: "",
      headers: Object.fromEntries(names.map((name) => [name, String(sent.headers[name])])),
      body: sent.body,
      amzDate,
      region: "eu-west-1",
      service: "execute-api",
      secretAccessKey: SECRET_KEY,
    });
    expect(match?.[6]).toBe(expected.signature);
  }, 30_000);
});

describe("apiClient with a bearer key", () => {
  it("sends Authorization: Bearer <key> and no signature", async () => {
    const api = apiClient(origin, { kind: "bearer", key: "e2e-key-a" });
    const response = await api("POST", "/jobs?limit=2", { type: "noop" });
    expect(response.status).toBe(200);
    const sent = only();
    expect(sent.headers.authorization).toBe("Bearer e2e-key-a");
    expect(sent.url).toBe("/jobs?limit=2");
    expect(sent.body.toString("utf8")).toBe('{"type":"noop"}');
    expect(sent.headers["content-type"]).toBe("application/json");
    for (const name of ["x-amz-date", "x-amz-security-token", "x-amz-content-sha256"])
      expect(sent.headers[name]).toBeUndefined();
  });

  it("takes a plain string as the key, as the sandbox callers do", async () => {
    await apiClient(origin, "local-dev-key")("GET", "/jobs");
    expect(only().headers.authorization).toBe("Bearer local-dev-key");
  });
});

describe("choosing the auth and the region", () => {
  it("IAM for a remote URL without a key, bearer with one, SCHEDULER_API_AUTH wins", () => {
    const url = "https://abc123.execute-api.eu-west-1.amazonaws.com/";
    expect(authModeFromEnv({})).toBe("bearer");
    expect(authModeFromEnv({ SCHEDULER_API_URL: url })).toBe("iam");
    expect(authModeFromEnv({ SCHEDULER_API_URL: url, SCHEDULER_API_KEY: "k" })).toBe("bearer");
    expect(
      authModeFromEnv({ SCHEDULER_API_URL: url, SCHEDULER_API_KEY_A: "k" }, [
        "SCHEDULER_API_KEY_A",
      ]),
    ).toBe("bearer");
    expect(
      authModeFromEnv({
        SCHEDULER_API_URL: url,
        SCHEDULER_API_KEY: "k",
        SCHEDULER_API_AUTH: "IAM",
      }),
    ).toBe("iam");
    expect(authModeFromEnv({ SCHEDULER_API_URL: url, SCHEDULER_API_AUTH: "bearer" })).toBe(
      "bearer",
    );
    expect(() => authModeFromEnv({ SCHEDULER_API_AUTH: "sigv4" })).toThrow(/iam.*bearer/);
  });

  it("takes the region from an execute-api host name, else AWS_REGION, else AWS_DEFAULT_REGION", () => {
    expect(regionOfHost("abc123.execute-api.eu-west-1.amazonaws.com")).toBe("eu-west-1");
    expect(regionOfHost("abc123.execute-api.us-gov-west-1.amazonaws.com")).toBe("us-gov-west-1");
    expect(regionOfHost("abc123.execute-api.cn-north-1.amazonaws.com.cn")).toBe("cn-north-1");
    expect(regionOfHost("api.example.com")).toBeUndefined();
    const env = { AWS_REGION: "us-east-2", AWS_DEFAULT_REGION: "ap-south-1" };
    const deployed = new URL("https://abc123.execute-api.eu-west-1.amazonaws.com/");
    expect(signingRegion(deployed, env)).toBe("eu-west-1");
    const custom = new URL("https://scheduler.example.com/");
    expect(signingRegion(custom, env)).toBe("us-east-2");
    expect(signingRegion(custom, { AWS_DEFAULT_REGION: "ap-south-1" })).toBe("ap-south-1");
    expect(() => signingRegion(custom, {})).toThrow(/AWS_REGION/);
  });
});
