import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import {
  newWebhookSecret,
  signingSecrets,
  webhookSignature,
} from "../../shared/webhooks/secrets.js";

describe("webhookSignature (Standard Webhooks)", () => {
  const body = JSON.stringify({ order: 42, note: "ünïcode" });
  const id = "01JOB@2026-01-01T00:00:00.000Z";
  const timestamp = Math.floor(Date.now() / 1000);
  const headers = (signature: string, webhookId = id) => ({
    "webhook-id": webhookId,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": signature,
  });

  it("is v1,<base64 HMAC-SHA256 of '<id>.<timestamp>.<body>'>, as the standardwebhooks library signs", () => {
    const secret = newWebhookSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const signature = webhookSignature([secret], id, timestamp, body);
    expect(signature).toBe(new Webhook(secret).sign(id, new Date(timestamp * 1000), body));
    expect(new Webhook(secret).verify(body, headers(signature))).toEqual(JSON.parse(body));
  });

  it("carries one signature per secret, space-separated; each secret verifies alone", () => {
    const [current, previous, other] = [newWebhookSecret(), newWebhookSecret(), newWebhookSecret()];
    const signature = webhookSignature([current, previous], id, timestamp, body);
    expect(signature.split(" ")).toHaveLength(2);
    expect(() => new Webhook(current).verify(body, headers(signature))).not.toThrow();
    expect(() => new Webhook(previous).verify(body, headers(signature))).not.toThrow();
    expect(() => new Webhook(other).verify(body, headers(signature))).toThrow(/No matching/);
  });

  it("binds the webhook-id: the same delivery under another id does not verify", () => {
    const secret = newWebhookSecret();
    const signature = webhookSignature([secret], id, timestamp, body);
    const replayed = headers(signature, "01JOB@2026-01-01T00:01:00.000Z");
    expect(() => new Webhook(secret).verify(body, replayed)).toThrow(/No matching/);
  });

  it("signs with the replaced secret only until its validity ends", () => {
    const secrets = {
      tenantId: "t",
      current: "whsec_bmV3",
      previous: { secret: "whsec_b2xk", validUntil: "2026-01-02T00:00:00.000Z" },
      version: 2,
      createdAt: "2026-01-01T00:00:00.000Z",
    };
    expect(signingSecrets(secrets, new Date("2026-01-01T23:59:59.999Z"))).toEqual([
      "whsec_bmV3",
      "whsec_b2xk",
    ]);
    expect(signingSecrets(secrets, new Date("2026-01-02T00:00:00.000Z"))).toEqual(["whsec_bmV3"]);
  });
});
