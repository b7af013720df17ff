import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobError } from "../../shared/execution/job-contract.js";
import { httpContext, httpHandlerWith, LOOPBACK_WORKERS } from "../support/http-handler.js";

/**
 * What a hostile TLS receiver can cost the worker's event loop. A TLS 1.2 server picks the cipher
 * suite, and with Node's default ciphers (four DHE-RSA suites among them) it could pick DHE with a
 * group of its own naming: `minDHSize` is a minimum, and OpenSSL takes any odd modulus up to
 * 10,000 bits without testing it for primality. The client's half of that exchange is two modular
 * exponentiations of that size on the main thread, before the certificate is judged, while
 * nothing else the worker does (other tenants' deliveries, lease heartbeats, queue polls) runs;
 * the receiver pays almost nothing. A delivery offers elliptic-curve key exchange only
 * (outbound.ts DELIVERY_TLS_OPTIONS). The receiver is a child process, so that its own work is
 * not counted.
 */

/** An RSA certificate for receiver.test (self-signed: the worker refuses it, after the key exchange). */
const RSA_KEY = `-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC5uzXvi9Eib/sq
l9xUlTIGpCINE0QKge+WosKWjFnWwHuLIasalt1SPfNoxjuc19YnZUudgYxIINn1
WTumFzAmqOvRm0q1K/n+WJcMas7wInCxkHPxzIY/UdyEtemKbvfjOxceYKTw/NzN
0dP7r8/9HsOBA65plMkYVU8ir4m3Mm4n2AZsQeAnB1Lu9vPD/ltvqjKVUAbHkF4r
4/kU6a5VQB+IY8mfR/qCh3Rvrai4Km/LqCVgfdgJcltLXtcfkoiumJ2tvz2Otxol
zHwj7L+qCU1WIuugOfbEKgj18C5GLQXY0ooiQkOpQ3u1uUzIyrboBX3UgetykGVe
smvSCL5VAgMBAAECggEABP3kCrW/rcv8ysFSqpah8IL6A/nWMSXh3cEu4cbXyUlo
vfS1a0fqZd5oC73m2ezoO55FSAzQ5/5BmA6QZ3TCMu4E/IOVywv3zu1eDekaiCmV
sJKx0w2TxeEdwDMh4OThZJSptTyUfrsooEnx6t32E0Gqd1+YrX2nmxNtqjlgVFUK
3yKqkL1p4uGwkhmBLYxMxIahPZKgNSi3SgjgmNAfmsHJxBTNaBf7Jnqi3aWTbocG
nOst6qrjqz0K+4JVUGtyBwdufiFwPqSu09JjyOqRcDofJhtdFNejDQt1GeBNbf0Q
ejVpnDL2lVO64o75egfTzbOAcepIG8jAWQ5zJhLXNwKBgQDdef+eSgw3bdEZEJgl
5vB1fdAErtesl+8X4y9Xg+x8KYqg2i5s7P3WPVmRxOV2eb9+COWjDcF4oN7e+ODJ
Jc3x46x4GmJiqLMyBPQckalSF/dENgvjwDEIO5ekSXkbsW4oGlwejRkJp2gnc1eL
wXxzwbux93gTI2sfYIDCrTvD/wKBgQDWrsz5+ssTB2r3lXrCBMq0kAVpVswAyO0Z
3MZNlrrw6hRTZXKmGaBdjEoeu2puvRZszI1OazKAUUZZydO5z7PoJ4aqAvYgQQyE
svHdbnmB6md0/aaTL41w0gYWOPEpfH2nZ1r8RLZ8+Y0Su9NdQpOKdXZSXxOckJ4K
KkLpAlctqwKBgQCyFbwFsnLaSxI8PkypBWZKgwy2B0TiwhR9t67Ehw6r09dleaqk
6Xc+Qnx4KsN7nW/tzwefMZtk/K3YynQtKZnMq45t0IFV5WKZkMQdCL8GhMDNd0ve
KRcEEK7hajbYnrX9xxxVcI02Zwbn2eYGOWFxztC2zE8fzHYBd95xK0yITwKBgQDD
j/CBN4iOCQ/UAYMWAq901E1ZrAuiG2aBTLAINeqNU264mY1a6bVAAm/ylt9ZiT5I
Vf3TFaunYGIpoMUSWraUII13icMTlq4Eo83X3K8rPZCI7hcztPmvcGLDE5P8Kr98
I5aqfx2NsvZjvl3IcsFcO6xRVPLUiJiuwdi50bwAiQKBgHvKUYN55MWJiC2zKqGR
Hrjq5MINVjcvf3PEk5uwUJZeCtQ9lo75XYuE2NfbkDmJMOH5AVOq5+HLCH0IW8+Z
O//uEMGwF7TesooVI0ZkaTJoXeJMCnjask/YWO8pt3N48NC9kapJSPJ067qq+huX
gcxkJblpG7acvl4cgQ8EL0jv
-----END PRIVATE KEY-----`;
const RSA_CERT = `-----BEGIN CERTIFICATE-----
MIIDLTCCAhWgAwIBAgIUWW/aaQIxgLvF9ugwmmwy8F2KPHswDQYJKoZIhvcNAQEL
BQAwGDEWMBQGA1UEAwwNcmVjZWl2ZXIudGVzdDAgFw0yNjEyMDcwMDU2NDlaGA8y
MTI2MTExMzAwNTY0OVowGDEWMBQGA1UEAwwNcmVjZWl2ZXIudGVzdDCCASIwDQYJ
KoZIhvcNAQEBBQADggEPADCCAQoCggEBALm7Ne+L0SJv+yqX3FSVMgakIg0TRAqB
75aiwpaMWdbAe4shqxqW3VI982jGO5zX1idlS52BjEgg2fVZO6YXMCao69GbSrUr
+f5YlwxqzvAicLGQc/HMhj9R3IS16Ypu9+M7Fx5gpPD83M3R0/uvz/0ew4EDrmmU
yRhVTyKvibcybifYBmxB4CcHUu7288P+W2+qMpVQBseQXivj+RTprlVAH4hjyZ9H
+oKHdG+tqLgqb8uoJWB92AlyW0te1x+SiK6Yna2/PY63GiXMfCPsv6oJTVYi66A5
9sQqCPXwLkYtBdjSiiJCQ6lDe7W5TMjKtugFfdSB63KQZV6ya9IIvlUCAwEAAaNt
MGswHQYDVR0OBBYEFHKWdMhClK+t3jbenHnAdYMeAB5oMB8GA1UdIwQYMBaAFHKW
dMhClK+t3jbenHnAdYMeAB5oMA8GA1UdEwEB/wQFMAMBAf8wGAYDVR0RBBEwD4IN
cmVjZWl2ZXIudGVzdDANBgkqhkiG9w0BAQsFAAOCAQEAd12EEQXY+CLdiDG7smYb
L2n0CDcOuMKDJTOVgiCo8XQ424avD9uc71IEobNy2DP/Jrgecu3qdte0mzuH7IVQ
PSE2M+Gyd8PaPcHFgviNhBx07ir0aQRFPRZG0TSSAa0xytrbjBateySjITs7jzJV
ORPn+6hVCWO5dXCIcSEwOvo8+TfQBmU3x+YOxsOkMk3jP8l0bIlX/XsGGZUe5aT1
1rVFHgvhrXwvHbMWHQd0O1hPzNnYmBrK4hKiwBYD2O/8+5P/RU1xcKqNAyjB2Jre
T28ZmTwplr2bvSNgIBDr4/gPA5wj/DNQiX7So+1JtCppvHicO6LgKZEQPLrH+rS6
DA==
-----END CERTIFICATE-----`;

/** DER of a DHParameter (PKCS #3) { p, g = 2 } with a random odd `bits`-bit p, as PEM. */
function dhParameters(bits: number): string {
  const p = randomBytes(bits / 8);
  p[0] = (p[0] ?? 0) | 0x80;
  p[p.length - 1] = (p[p.length - 1] ?? 0) | 1;
  const length = (n: number): Buffer => {
    if (n < 0x80) return Buffer.from([n]);
    const bytes: number[] = [];
    for (let rest = n; rest > 0; rest >>= 8) bytes.unshift(rest & 0xff);
    return Buffer.from([0x80 | bytes.length, ...bytes]);
  };
  const integer = (value: Buffer): Buffer => {
    const positive = (value[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), value]) : value;
    return Buffer.concat([Buffer.from([2]), length(positive.length), positive]);
  };
  const body = Buffer.concat([integer(p), integer(Buffer.from([2]))]);
  const der = Buffer.concat([Buffer.from([0x30]), length(body.length), body]);
  const lines = der.toString("base64").match(/.{1,64}/g) ?? [];
  return `-----BEGIN DH PARAMETERS-----\n${lines.join("\n")}\n-----END DH PARAMETERS-----\n`;
}

/** TLS 1.2, DHE-RSA only, the group from DH_PARAMS. */
const DHE_ONLY = { ciphers: "DHE-RSA-AES128-GCM-SHA256", maxVersion: "TLSv1.2" };

/** The receiver: TLS_OPTIONS (JSON) with the RSA certificate; prints its port. */
const RECEIVER = `
const tls = require("node:tls");
const server = tls.createServer({
  key: process.env.RSA_KEY, cert: process.env.RSA_CERT, dhparam: process.env.DH_PARAMS,
  ...JSON.parse(process.env.TLS_OPTIONS),
}, (socket) => { socket.on("error", () => {}); socket.end("HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n"); });
server.on("tlsClientError", () => {});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
`;

async function startReceiver(
  bits: number,
  tlsOptions: object = DHE_ONLY,
): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, ["-e", RECEIVER], {
    env: {
      ...process.env,
      RSA_KEY,
      RSA_CERT,
      DH_PARAMS: dhParameters(bits),
      TLS_OPTIONS: JSON.stringify(tlsOptions),
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once("error", reject);
    child.stdout?.once("data", (data: Buffer) => resolve(Number(String(data).trim())));
  });
  return { child, port };
}

const [, deployed, host] = LOOPBACK_WORKERS[0];
const receivers: ChildProcess[] = [];
let hostilePort = 0;
let ordinaryPort = 0;
let ffdhePort = 0;
beforeAll(async () => {
  const hostile = await startReceiver(10_000);
  const ordinary = await startReceiver(2048);
  // TLS 1.3 names its groups: ffdhe8192 alone, which cost the worker ~61 ms a handshake.
  const ffdhe = await startReceiver(2048, { minVersion: "TLSv1.3", ecdhCurve: "ffdhe8192" });
  receivers.push(hostile.child, ordinary.child, ffdhe.child);
  hostilePort = hostile.port;
  ordinaryPort = ordinary.port;
  ffdhePort = ffdhe.port;
});
afterAll(() => {
  for (const child of receivers) child.kill();
});

/** The longest the event loop was held (ms) while `deliveries` deliveries to `port` ran at once. */
async function longestStall(port: number, deliveries: number): Promise<number> {
  const deliver = httpHandlerWith(deployed);
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const errors = await Promise.all(
    Array.from({ length: deliveries }, () =>
      deliver(httpContext(`https://${host}:${port}/hook`)).then(
        () => null,
        (error: unknown) => error,
      ),
    ),
  );
  delay.disable();
  // Each failed on the certificate, after the key exchange: the self-signed one is not trusted.
  for (const error of errors) expect(error).toBeInstanceOf(JobError);
  return delay.max / 1e6;
}

describe("a TLS receiver offering a 10,000-bit Diffie-Hellman group", () => {
  it("with a 2048-bit group, as a control, holds the event loop for little", async () => {
    expect(await longestStall(ordinaryPort, 2)).toBeLessThan(250);
  });

  it("does not hold the worker's event loop, which runs every tenant's runs, for longer than a 2048-bit one does", async () => {
    expect(await longestStall(hostilePort, 2)).toBeLessThan(250);
  });
});

describe("a TLS 1.3 receiver that takes a finite-field group only", () => {
  it("is refused at the key exchange: the worker offers elliptic curves only", async () => {
    const error = await httpHandlerWith(deployed)(
      httpContext(`https://${host}:${ffdhePort}/hook`),
    ).then(
      () => null,
      (failure: unknown) => failure,
    );
    expect(error).toBeInstanceOf(JobError);
    // Not the certificate's refusal, which would come after an ffdhe8192 exchange.
    expect((error as JobError).message).toMatch(/handshake failure/);
  });
});
