import { describe, expect, it } from "vitest";
import { addressesAs } from "../../shared/execution/address-text.js";

/** What a failed connection's text becomes before the tenant reads it: each address as the host. */
describe("addressesAs", () => {
  it.each([
    ["connect ECONNREFUSED 203.0.113.7:443", "connect ECONNREFUSED receiver.test:443"],
    ["connect ECONNREFUSED ::1:43085", "connect ECONNREFUSED receiver.test:43085"],
    // Node writes an IPv6 address and its port unbracketed; `::1:443` is itself an address.
    ["connect ECONNREFUSED ::1:443", "connect ECONNREFUSED receiver.test"],
    ["connect ECONNREFUSED [2001:db8::1]:443", "connect ECONNREFUSED receiver.test:443"],
    ["at 203.0.113.7:443:1", "at receiver.test:443:1"],
    [
      "IP Address:127.0.0.1, IP Address:2001:DB8:0:0:0:0:0:1",
      "IP Address:receiver.test, IP Address:receiver.test",
    ],
    ["from:203.0.113.7 via fe80::1%eth0", "from:receiver.test via receiver.test"],
    ["mapped ::ffff:10.1.2.3 and ::ffff:10.1.2.3:80", "mapped receiver.test and receiver.test:80"],
    [
      "(attempted addresses: 10.0.0.1:443, 10.0.0.2:443, timeout: 10000ms)",
      "(attempted addresses: receiver.test:443, receiver.test:443, timeout: 10000ms)",
    ],
  ])("%j names the host instead of the address", (text, told) => {
    expect(addressesAs("receiver.test", text)).toBe(told);
  });

  it.each([
    "10.9.8.7.nip.test has no A or AAAA record",
    "1.2.3.4-svc.test did not resolve (A: ESERVFAIL, AAAA: ENODATA)",
    "DNS:internal.example, timeout: 10000ms, 12:30:45",
    "read ECONNRESET",
  ])("%j holds no address and stays as it is", (text) => {
    expect(addressesAs("receiver.test", text)).toBe(text);
  });

  it("reads a long run of colons once, not once a colon", () => {
    const text = `peer said ${":".repeat(64 * 1024)}! then 10.1.2.3`;
    const started = performance.now();
    expect(addressesAs("receiver.test", text)).toBe(
      `peer said ${":".repeat(64 * 1024)}! then receiver.test`,
    );
    expect(performance.now() - started).toBeLessThan(1000);
  });
});
