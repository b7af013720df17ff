import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRetryable, JobError } from "../../shared/execution/job-contract.js";
import { dnsResolver, refusalIn } from "../../shared/execution/outbound.js";
import { type FakeDns, fakeDns } from "../support/fake-dns.js";
import { httpContext, httpHandlerWith } from "../support/http-handler.js";

/**
 * A tenant's ways of spelling a private host that outbound.test.ts's table does not hold, against
 * a deployed worker whose resolver asks a fake DNS server: hosts the URL parser rewrites (IDNA's
 * full-width and circled forms, ideographic full stops, a trailing dot) and names whose DNS answers
 * carry a private address in another form (IPv4-mapped, NAT64, 6to4, Teredo, EC2's IPv6 metadata
 * address). Each is refused before any connection, and no loopback name is ever asked of DNS.
 */
let server: Server;
let port = 0;
let hits = 0;
let dns: FakeDns;

const ANSWERS: Readonly<Record<string, readonly string[]>> = {
  "zeros.test": ["0.0.0.0"],
  "ecs-metadata.test": ["169.254.170.2"],
  "mapped-imds.test": ["93.184.215.14", "::ffff:a9fe:a9fe"],
  "nat64-imds.test": ["64:ff9b::a9fe:a9fe"],
  "local-nat64.test": ["64:ff9b:1::a00:1"],
  "sixtofour.test": ["2002:a9fe:a9fe::1"],
  "teredo.test": ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
  "ec2-v6-metadata.test": ["fd00:ec2::254"],
  "compatible.test": ["::7f00:1"],
};

beforeAll(async () => {
  dns = await fakeDns(
    { ...ANSWERS, localhost: ["93.184.215.14"], "api.localhost": ["93.184.215.14"] },
    [],
  );
  server = createServer((_req, res) => {
    hits++;
    res.writeHead(200).end("internal");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(async () => {
  await dns.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

async function refusal(host: string): Promise<JobError> {
  const deliver = httpHandlerWith({ resolve: dnsResolver({ servers: [dns.server] }) });
  const error = await deliver(httpContext(`http://${host}:${port}/admin`)).then(
    (answer) => new Error(`delivered: ${JSON.stringify(answer)}`),
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(JobError);
  expect(isRetryable(error as JobError)).toBe(false);
  return error as JobError;
}

describe("a deployed worker", () => {
  it.each([
    ["１２７.０.０.１", "127.0.0.1 is loopback"],
    ["127。0。0。1", "127.0.0.1 is loopback"],
    ["127.0.0.1.", "127.0.0.1 is loopback"],
    ["0x7f.0.0.1.", "127.0.0.1 is loopback"],
    ["①⑥⑨.②⑤④.①⑥⑨.②⑤④", "169.254.169.254 is linkLocal"],
    ["[::ffff:7f00:1]", "[::ffff:7f00:1] is loopback"],
  ])("refuses %s as the literal the URL parser makes of it", async (host, why) => {
    expect((await refusal(host)).message).toBe(`target ${why}; refused`);
  });

  it.each([
    ["ｌｏｃａｌｈｏｓｔ", "localhost"],
    ["ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "localhost"],
    ["LOCALHOST.", "localhost."],
    ["api.localhost.", "api.localhost."],
    ["API.LocalHost", "api.localhost"],
  ])(
    "takes %s for loopback without asking DNS, which would answer a public address",
    async (host, name) => {
      const error = await refusal(host);
      expect(error.message).toBe(
        `target ${name} resolves to a non-public address (loopback); refused`,
      );
      expect(refusalIn(error)?.context.address).toBe("127.0.0.1");
      expect(dns.queries.get("localhost") ?? 0).toBe(0);
      expect(dns.queries.get("api.localhost") ?? 0).toBe(0);
    },
  );

  it.each(
    Object.entries({
      "zeros.test": "0.0.0.0 (unspecified)",
      "ecs-metadata.test": "169.254.170.2 (linkLocal)",
      "mapped-imds.test": "::ffff:169.254.169.254 (linkLocal)",
      "nat64-imds.test": "64:ff9b::a9fe:a9fe (rfc6052)",
      "local-nat64.test": "64:ff9b:1::a00:1 (rfc6052)",
      "sixtofour.test": "2002:a9fe:a9fe::1 (6to4)",
      "teredo.test": "2001:0:4136:e378:8000:63bf:3fff:fdd2 (teredo)",
      "ec2-v6-metadata.test": "fd00:ec2::254 (uniqueLocal)",
      "compatible.test": "::127.0.0.1 (loopback)",
    }),
  )("refuses %s, whose DNS answer is %s", async (host, answer) => {
    // The address stays in the refusal's context, for the worker's log: the message is the tenant's.
    const [address, why] = answer.split(" ");
    const error = await refusal(host);
    expect(error.message).toBe(`target ${host} resolves to a non-public address ${why}; refused`);
    expect(refusalIn(error)?.context.address).toBe(address);
    expect(dns.queries.get(host)).toBeGreaterThan(0);
  });

  it("connected to none of them", () => {
    expect(hits).toBe(0);
  });
});
