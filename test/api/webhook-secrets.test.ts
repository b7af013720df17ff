import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { ScanCommand, UpdateCommand } from "@aws-sdk/lib-dynamodb";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebhookSecretSchema } from "../../shared/api/schemas/webhook-secret.js";
import { builtInHandlers } from "../../shared/execution/built-in-handlers.js";
import { readWebhookSecrets } from "../../shared/storage/webhook-secrets.js";
import {
  cachedSigningSecrets,
  PREVIOUS_SECRET_VALID_MS,
  rotateWebhookSecret,
  signingSecrets,
  tenantWebhookSecrets,
  webhookSignature,
} from "../../shared/webhooks/secrets.js";
import {
  type ApiHarness,
  expectError,
  KEY_A,
  KEY_B,
  laterJob,
  type Reply,
  startApi,
  TENANT_A,
} from "./support.js";

let api: ApiHarness;
/** How far ahead of real time the API's clock runs: a test that moves it puts it back. */
let clockShiftMs = 0;
beforeAll(async () => {
  api = await startApi({ clock: () => new Date(Date.now() + clockShiftMs) });
});
afterAll(() => api.close());

const secretOf = async (key: string) => {
  const reply = await api.call("GET", "/webhook-secret", { key });
  expect(reply.status, reply.text).toBe(200);
  expect(reply.headers.get("cache-control")).toBe("no-store");
  return WebhookSecretSchema.parse(reply.body).secret;
};

describe("GET /webhook-secret", () => {
  it("makes the caller's secret on first use and returns the same one after", async () => {
    const first = await secretOf(KEY_A);
    expect(first).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(first.slice(6), "base64")).toHaveLength(32);
    expect(await secretOf(KEY_A)).toBe(first);
  });

  it("gives each tenant its own", async () => {
    expect(await secretOf(KEY_B)).not.toBe(await secretOf(KEY_A));
  });

  it("needs credentials", async () => {
    expectError(await api.call("GET", "/webhook-secret", { key: null }), 401);
    expectError(await api.call("POST", "/webhook-secret/rotate", { key: null }), 401);
  });

  it("is race-safe: first uses at once all get the one secret that was stored", async () => {
    const tenant = `race-${Date.now()}`;
    const seen = await Promise.all(
      Array.from({ length: 8 }, () => tenantWebhookSecrets(api.fixture.engine, tenant)),
    );
    expect(new Set(seen.map((s) => s.current)).size).toBe(1);
    const stored = await tenantWebhookSecrets(api.fixture.engine, tenant);
    expect(stored.current).toBe(seen[0]?.current);
  });

  it("is never part of a job read, and no job item holds it", async () => {
    const secret = await secretOf(KEY_A);
    const created = await api.call("POST", "/jobs", { key: KEY_A, body: laterJob() });
    const id = (created.body as { id: string }).id;
    const read = await api.call("GET", `/jobs/${id}`, { key: KEY_A });
    const list = await api.call("GET", "/jobs", { key: KEY_A });
    expect(read.text).not.toContain(secret.slice(6));
    expect(list.text).not.toContain(secret.slice(6));
    const { Items = [] } = await api.fixture.engine.doc.send(
      new ScanCommand({ TableName: api.fixture.engine.tables.jobs }),
    );
    expect(JSON.stringify(Items)).not.toContain(secret.slice(6));
  });
});

describe("target headers", () => {
  it("cannot name a webhook-* header: the scheduler sets those", async () => {
    const reply = await api.call("POST", "/jobs", {
      key: KEY_A,
      body: {
        type: "http",
        schedule: { runAt: new Date(Date.now() + 86_400_000).toISOString() },
        target: { url: "https://receiver.example/hook", headers: { "Webhook-Signature": "v1,x" } },
      },
    });
    expectError(reply, 400, { field: "target.headers.Webhook-Signature" });
  });
});

describe("POST /webhook-secret/rotate", () => {
  it("returns a new secret, which GET returns from then on; the other tenant's is untouched", async () => {
    const before = await secretOf(KEY_A);
    const other = await secretOf(KEY_B);
    const reply = await api.call("POST", "/webhook-secret/rotate", { key: KEY_A });
    expect(reply.status, reply.text).toBe(200);
    expect(reply.headers.get("cache-control")).toBe("no-store");
    const after = WebhookSecretSchema.parse(reply.body).secret;
    expect(after).not.toBe(before);
    expect(await secretOf(KEY_A)).toBe(after);
    expect(await secretOf(KEY_B)).toBe(other);
    const stored = await tenantWebhookSecrets(api.fixture.engine, TENANT_A);
    expect(stored.previous?.secret).toBe(before);
    expect(Date.parse(stored.previous?.validUntil ?? "") - Date.parse(stored.rotatedAt ?? "")).toBe(
      PREVIOUS_SECRET_VALID_MS,
    );
  });

  it("rotations at once all succeed, one after another, and the last one's secret is current", async () => {
    const tenant = `rotate-race-${Date.now()}`;
    const engine = api.fixture.engine;
    await tenantWebhookSecrets(engine, tenant);
    const outcomes = await Promise.allSettled([
      rotateWebhookSecret(engine, tenant),
      rotateWebhookSecret(engine, tenant),
    ]);
    const rotated = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
    expect(rotated.length).toBeGreaterThanOrEqual(1);
    const stored = await tenantWebhookSecrets(engine, tenant);
    const newest = rotated.sort((a, b) => b.version - a.version)[0];
    expect(stored.current).toBe(newest?.current);
    expect(stored.version).toBe(1 + rotated.length);
  });
});

describe("POST /webhook-secret/rotate with an Idempotency-Key", () => {
  const rotate = (key: string, idempotencyKey?: string) =>
    api.call("POST", "/webhook-secret/rotate", {
      key,
      ...(idempotencyKey === undefined ? {} : { headers: { "Idempotency-Key": idempotencyKey } }),
    });
  const rotatedSecret = (reply: Reply) => {
    expect(reply.status, reply.text).toBe(200);
    expect(reply.headers.get("cache-control")).toBe("no-store");
    return WebhookSecretSchema.parse(reply.body).secret;
  };
  const stored = async (tenant: string) => {
    const secrets = await readWebhookSecrets(api.fixture.engine, tenant);
    if (!secrets) throw new Error(`tenant ${tenant} has no secrets`);
    return secrets;
  };

  it("a repeat with the key of the current secret's rotation answers that secret and writes nothing", async () => {
    const before = await secretOf(KEY_A);
    const key = `rotate-repeat-${Date.now()}`;
    const first = rotatedSecret(await rotate(KEY_A, key));
    expect(first).not.toBe(before);
    const afterFirst = await stored(TENANT_A);
    const again = rotatedSecret(await rotate(KEY_A, key));
    expect(again).toBe(first);
    // Not written again: the same version, and the replaced secret is still the one it started from.
    expect(await stored(TENANT_A)).toEqual(afterFirst);
    expect(afterFirst.previous?.secret).toBe(before);
    expect(await secretOf(KEY_A)).toBe(first);
  });

  it("a new key, or none, rotates", async () => {
    const first = rotatedSecret(await rotate(KEY_A, `rotate-new-a-${Date.now()}`));
    const second = rotatedSecret(await rotate(KEY_A, `rotate-new-b-${Date.now()}`));
    expect(second).not.toBe(first);
    const third = rotatedSecret(await rotate(KEY_A));
    expect(third).not.toBe(second);
    expect((await stored(TENANT_A)).previous?.secret).toBe(second);
  });

  it("keys are per tenant: another tenant's key rotates its own secret", async () => {
    const key = `rotate-shared-${Date.now()}`;
    const a = rotatedSecret(await rotate(KEY_A, key));
    const b = rotatedSecret(await rotate(KEY_B, key));
    expect(b).not.toBe(a);
    expect(await secretOf(KEY_A)).toBe(a);
  });

  it("rotates at once with one key make exactly one rotation, and all answer its secret", async () => {
    const before = await stored(TENANT_A);
    const key = `rotate-race-${Date.now()}`;
    const replies = await Promise.all(Array.from({ length: 4 }, () => rotate(KEY_A, key)));
    const secrets = new Set(replies.map(rotatedSecret));
    expect(secrets.size).toBe(1);
    const after = await stored(TENANT_A);
    expect(after.version).toBe(before.version + 1);
    expect([...secrets]).toEqual([after.current]);
    expect(after.previous?.secret).toBe(before.current);
  });

  it("the key of a rotation a later one replaced is 409 and writes nothing: its secret is no longer current", async () => {
    const old = `rotate-old-${Date.now()}`;
    const replaced = rotatedSecret(await rotate(KEY_A, old));
    const current = rotatedSecret(await rotate(KEY_A, `rotate-later-${Date.now()}`));
    const before = await stored(TENANT_A);
    const error = expectError(await rotate(KEY_A, old), 409, { code: "idempotency_conflict" });
    expect(error.message).toContain("GET /webhook-secret");
    expect(await stored(TENANT_A)).toEqual(before);
    expect(await secretOf(KEY_A)).toBe(current);
    expect(before.previous?.secret).toBe(replaced);
    // Replaced by a rotation without a key, likewise.
    const unkeyed = `rotate-then-unkeyed-${Date.now()}`;
    rotatedSecret(await rotate(KEY_A, unkeyed));
    rotatedSecret(await rotate(KEY_A));
    expectError(await rotate(KEY_A, unkeyed), 409, { code: "idempotency_conflict" });
  });

  it("a key is answered for 24 hours after its rotation; after that it rotates", async () => {
    const key = `rotate-day-${Date.now()}`;
    const first = rotatedSecret(await rotate(KEY_A, key));
    try {
      clockShiftMs = PREVIOUS_SECRET_VALID_MS - 60_000;
      expect(rotatedSecret(await rotate(KEY_A, key))).toBe(first);
      clockShiftMs = PREVIOUS_SECRET_VALID_MS + 60_000;
      const next = rotatedSecret(await rotate(KEY_A, key));
      expect(next).not.toBe(first);
      expect((await stored(TENANT_A)).previous?.secret).toBe(first);
      // And that rotation is the key's now: a repeat answers it.
      expect(rotatedSecret(await rotate(KEY_A, key))).toBe(next);
    } finally {
      clockShiftMs = 0;
    }
  });

  it("a replaced rotation's key is 409 while its secret still signs, then forgotten: it rotates", async () => {
    const old = `rotate-forgotten-${Date.now()}`;
    rotatedSecret(await rotate(KEY_A, old));
    try {
      clockShiftMs = 60 * 60_000;
      const later = rotatedSecret(await rotate(KEY_A, `rotate-after-${Date.now()}`));
      clockShiftMs += PREVIOUS_SECRET_VALID_MS - 60_000;
      expectError(await rotate(KEY_A, old), 409, { code: "idempotency_conflict" });
      clockShiftMs += 120_000;
      const again = rotatedSecret(await rotate(KEY_A, old));
      expect(again).not.toBe(later);
    } finally {
      clockShiftMs = 0;
    }
  });

  it("a rotation by an earlier version of the code, which keeps no keys, is seen: the key's secret is then the replaced one", async () => {
    // While an upgrade rolls out (or after a rollback) an earlier API function may rotate: it
    // moves the secrets and the version, and leaves the key attributes as they were.
    const key = `rotate-mixed-${Date.now()}`;
    const made = rotatedSecret(await rotate(KEY_A, key));
    const before = await stored(TENANT_A);
    const byEarlierCode = "whsec_RWFybGllckNvZGVSb3RhdGVkVGhpc1NlY3JldEJ5SXRzZWxmMDA=";
    await api.fixture.engine.doc.send(
      new UpdateCommand({
        TableName: api.fixture.engine.tables.webhookSecrets,
        Key: { pk: `WEBHOOKSECRET#${TENANT_A}` },
        UpdateExpression:
          "SET #current = :current, previous = :previous, previousValidUntil = :until, version = :next, rotatedAt = :at",
        ExpressionAttributeNames: { "#current": "current" },
        ExpressionAttributeValues: {
          ":current": byEarlierCode,
          ":previous": made,
          ":until": new Date(Date.now() + PREVIOUS_SECRET_VALID_MS).toISOString(),
          ":next": before.version + 1,
          ":at": new Date().toISOString(),
        },
      }),
    );
    // The key's rotation did not make the current secret: answering that as the key's would be
    // wrong. Its secret is the one the earlier code's rotation replaced, still signing: a 409.
    const afterEarlier = await stored(TENANT_A);
    expectError(await rotate(KEY_A, key), 409, { code: "idempotency_conflict" });
    expect(await stored(TENANT_A)).toEqual(afterEarlier);
    // Once a rotation of this version follows, a key two rotations back is forgotten.
    const next = rotatedSecret(await rotate(KEY_A));
    expect(rotatedSecret(await rotate(KEY_A, key))).not.toBe(next);
  });

  it("a key that is not 1 to 200 visible ASCII characters is a 400 naming Idempotency-Key, and rotates nothing", async () => {
    const before = await stored(TENANT_A);
    for (const bad of ["bad key", "x".repeat(201), "é"]) {
      expectError(await rotate(KEY_A, bad), 400, { field: "Idempotency-Key" });
    }
    expect(await stored(TENANT_A)).toEqual(before);
  });
});

describe("deliveries across a rotation", () => {
  it("are signed with the new and the replaced secret for a day, then with the new one only", async () => {
    const deliveries: { headers: IncomingHttpHeaders; body: string }[] = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        deliveries.push({ headers: req.headers, body });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const tenant = `rotation-${Date.now()}`;
    let now = new Date();
    const engine = { ...api.fixture.engine, clock: () => now };
    // No caching here: each delivery reads the secrets, so the clock alone decides.
    const handler = builtInHandlers(
      { signingSecrets: cachedSigningSecrets(engine, { ttlMs: 0 }), allowPrivateTargets: true },
      () => new Date(),
    ).get("http");
    if (!handler) throw new Error("no http handler");
    const deliver = (n: number) =>
      handler({
        jobId: "job",
        tenantId: tenant,
        runId: `run-${n}`,
        type: "http",
        scheduledFor: `2026-01-01T00:00:0${n}.000Z`,
        attempt: 1,
        idempotencyKey: `job@2026-01-01T00:00:0${n}.000Z`,
        payload: { n },
        // Stored before webhook-* names were refused: dropped, never merged into the signature.
        target: { url, headers: { "Webhook-Signature": "v1,forged", "X-Extra": "kept" } },
        signal: new AbortController().signal,
        fence: 1,
      });
    const verifies = (secret: string, index: number) => {
      const delivery = deliveries[index];
      if (!delivery) throw new Error(`no delivery ${index}`);
      const headers = {
        "webhook-id": String(delivery.headers["webhook-id"]),
        "webhook-timestamp": String(delivery.headers["webhook-timestamp"]),
        "webhook-signature": String(delivery.headers["webhook-signature"]),
      };
      try {
        new Webhook(secret).verify(delivery.body, headers);
        return true;
      } catch {
        return false;
      }
    };
    try {
      await deliver(0);
      const old = (await tenantWebhookSecrets(engine, tenant)).current;
      const rotated = (await rotateWebhookSecret(engine, tenant)).current;
      await deliver(1);
      now = new Date(now.getTime() + PREVIOUS_SECRET_VALID_MS + 1000);
      await deliver(2);
      expect([verifies(old, 0), verifies(rotated, 0)]).toEqual([true, false]);
      expect([verifies(old, 1), verifies(rotated, 1)]).toEqual([true, true]);
      expect(String(deliveries[1]?.headers["webhook-signature"]).split(" ")).toHaveLength(2);
      expect([verifies(old, 2), verifies(rotated, 2)]).toEqual([false, true]);
      expect(deliveries.map((d) => d.headers["x-extra"])).toEqual(["kept", "kept", "kept"]);
      expect(deliveries.map((d) => d.headers["webhook-id"])).toEqual(
        deliveries.map((d) => d.headers["idempotency-key"]),
      );
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("a worker's cache shows a rotation once its time is up", async () => {
    const tenant = `cache-${Date.now()}`;
    let now = new Date();
    const engine = { ...api.fixture.engine, clock: () => now };
    const source = cachedSigningSecrets(engine, { ttlMs: 30_000 });
    const [first] = await source(tenant);
    const rotated = (await rotateWebhookSecret(engine, tenant)).current;
    now = new Date(now.getTime() + 29_000);
    expect(await source(tenant)).toEqual([first]);
    now = new Date(now.getTime() + 1_000);
    expect(await source(tenant)).toEqual([rotated, first]);
  });
});

describe("the replaced secret's day, by a fixed clock", () => {
  /** Whether a receiver holding `secret` accepts a delivery signed with `signers` (standardwebhooks). */
  const accepts = (secret: string, signers: readonly string[]) => {
    const id = "job@2030-01-01T00:00:00.000Z";
    const timestamp = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({ hello: "world" });
    try {
      new Webhook(secret).verify(body, {
        "webhook-id": id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": webhookSignature(signers, id, timestamp, body),
      });
      return true;
    } catch {
      return false;
    }
  };

  it("signs with the replaced secret until 24 hours after the rotation, to the millisecond, and never with another tenant's", async () => {
    const tenant = `day-${Date.now()}`;
    const other = `day-other-${Date.now()}`;
    const rotatedAt = new Date("2030-06-01T12:00:00.000Z");
    const engine = { ...api.fixture.engine, clock: () => rotatedAt };
    const replaced = (await tenantWebhookSecrets(engine, tenant)).current;
    const rotated = await rotateWebhookSecret(engine, tenant);
    const otherSecret = (await tenantWebhookSecrets(engine, other)).current;
    const at = (ms: number) => signingSecrets(rotated, new Date(rotatedAt.getTime() + ms));

    expect(at(0)).toEqual([rotated.current, replaced]);
    expect(at(PREVIOUS_SECRET_VALID_MS - 1)).toEqual([rotated.current, replaced]);
    expect(at(PREVIOUS_SECRET_VALID_MS)).toEqual([rotated.current]);
    const lastMoment = at(PREVIOUS_SECRET_VALID_MS - 1);
    expect([accepts(replaced, lastMoment), accepts(rotated.current, lastMoment)]).toEqual([
      true,
      true,
    ]);
    const after = at(PREVIOUS_SECRET_VALID_MS);
    expect([accepts(replaced, after), accepts(rotated.current, after)]).toEqual([false, true]);
    // Another tenant's receiver accepts none of them, and this tenant's none of its.
    expect(accepts(otherSecret, lastMoment)).toBe(false);
    expect(accepts(rotated.current, [otherSecret])).toBe(false);
    expect(otherSecret).not.toBe(replaced);
  });

  it("a rotation racing a tenant's first GET: the GET answers a secret that still signs, and the rotation's is current", async () => {
    for (let i = 0; i < 5; i++) {
      const tenant = `first-get-race-${Date.now()}-${i}`;
      const engine = api.fixture.engine;
      const [read, rotated] = await Promise.all([
        tenantWebhookSecrets(engine, tenant),
        rotateWebhookSecret(engine, tenant),
      ]);
      const stored = await tenantWebhookSecrets(engine, tenant);
      expect(stored.current).toBe(rotated.current);
      expect(stored.version).toBe(2);
      expect(signingSecrets(stored, engine.clock())).toContain(read.current);
    }
  });
});
