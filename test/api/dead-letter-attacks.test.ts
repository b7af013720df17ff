import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunPageSchema, RunSchema } from "../../shared/api/schemas/runs.js";
import { WebhookSecretSchema } from "../../shared/api/schemas/webhook-secret.js";
import { readWebhookSecrets } from "../../shared/storage/webhook-secrets.js";
import {
  cachedSigningSecrets,
  signingSecrets,
  webhookSignature,
} from "../../shared/webhooks/secrets.js";
import { verifyDelivery } from "../support/receiver.js";
import {
  type ApiHarness,
  deadRunVia,
  expectError,
  KEY_A,
  KEY_B,
  runOnce,
  startApi,
} from "./support.js";

/**
 * Adversarial review (h76): a tenant probing another's dead letters and secrets, and the answers
 * an operator relies on. Each case names what it tries; each passes where the code holds.
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

/** The DynamoDB commands the API sends while `act` runs, by name. */
async function commandsDuring(act: () => Promise<unknown>): Promise<string[]> {
  const names: string[] = [];
  const stack = api.fixture.engine.doc.middlewareStack;
  const name = `h76-count-${Math.random()}`;
  stack.add(
    (next, context) => async (args) => {
      names.push(String(context.commandName));
      return next(args);
    },
    { step: "initialize", name },
  );
  try {
    await act();
  } finally {
    stack.remove(name);
  }
  return names;
}

async function allDeadLetters(key: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const reply = await api.call(
      "GET",
      `/dead-letters?limit=1${cursor ? `&cursor=${cursor}` : ""}`,
      { key },
    );
    expect(reply.status, reply.text).toBe(200);
    const page = RunPageSchema.parse(reply.body);
    ids.push(...page.items.map((r) => r.runId));
    cursor = page.nextCursor;
  } while (cursor !== null);
  return ids;
}

const deadOf = async (jobId: string, key = KEY_A) => {
  const runs = RunPageSchema.parse((await api.call("GET", `/jobs/${jobId}/runs`, { key })).body);
  const dead = runs.items.find((r) => r.status === "dead" && r.replayedBy === null);
  if (!dead) throw new Error(`no dead run of ${jobId}`);
  return dead;
};

describe("another tenant's dead run", () => {
  it("is answered as an unknown run, with the same body and the same storage reads, key or none; nothing is written", async () => {
    const { jobId } = await deadRunVia(api, KEY_A);
    const dead = await deadOf(jobId);
    // The same shape of id, for a job that does not exist.
    const unknown = dead.runId.replace(jobId, "01ZZZZZZZZZZZZZZZZZZZZZZZZ");
    const replayAs = (runId: string, key?: string) => () =>
      api.call("POST", `/dead-letters/${runId}/replay`, {
        key: KEY_B,
        ...(key ? { headers: { "Idempotency-Key": key } } : {}),
      });
    for (const idempotencyKey of [undefined, "b-key"]) {
      let real = await replayAs(dead.runId, idempotencyKey)();
      let none = await replayAs(unknown, idempotencyKey)();
      const realError = expectError(real, 404);
      const noneError = expectError(none, 404);
      expect(realError.message.replace(dead.runId, "<id>")).toBe(
        noneError.message.replace(unknown, "<id>"),
      );
      const realReads = await commandsDuring(async () => {
        real = await replayAs(dead.runId, idempotencyKey)();
      });
      const noneReads = await commandsDuring(async () => {
        none = await replayAs(unknown, idempotencyKey)();
      });
      expect(realReads).toEqual(noneReads);
    }
    // A's dead letter is as it was, listed for A only.
    expect(await deadOf(jobId)).toMatchObject({ runId: dead.runId, replayedBy: null });
    expect(await allDeadLetters(KEY_B)).not.toContain(dead.runId);
    expect((await allDeadLetters(KEY_A)).filter((id) => id === dead.runId)).toHaveLength(1);
  });

  it("A's replay Idempotency-Key sent by B for A's replayed run answers nothing of A's", async () => {
    const { jobId } = await deadRunVia(api, KEY_A);
    const dead = await deadOf(jobId);
    const first = await api.call("POST", `/dead-letters/${dead.runId}/replay`, {
      headers: { "Idempotency-Key": "shared-key" },
    });
    expect(first.status, first.text).toBe(202);
    const asB = await api.call("POST", `/dead-letters/${dead.runId}/replay`, {
      key: KEY_B,
      headers: { "Idempotency-Key": "shared-key" },
    });
    expectError(asB, 404);
    expect(asB.headers.get("location")).toBeNull();
  });
});

describe("dead-letter listing", () => {
  it("pages one at a time list each of a tenant's dead runs exactly once, and none of another's", async () => {
    // One after another: runOnce leaves other jobs' messages hidden for a visibility timeout.
    const a = [await deadRunVia(api, KEY_A), await deadRunVia(api, KEY_A)];
    const b = await deadRunVia(api, KEY_B);
    const aDead = await Promise.all(a.map(({ jobId }) => deadOf(jobId)));
    const bDead = await deadOf(b.jobId, KEY_B);
    const listedA = await allDeadLetters(KEY_A);
    const listedB = await allDeadLetters(KEY_B);
    for (const { runId } of aDead) expect(listedA.filter((id) => id === runId)).toHaveLength(1);
    expect(listedA).not.toContain(bDead.runId);
    expect(listedB.filter((id) => id === bDead.runId)).toHaveLength(1);
    for (const { runId } of aDead) expect(listedB).not.toContain(runId);
    expect(new Set(listedA).size).toBe(listedA.length);
  });
});

describe("a replay whose own run dies", () => {
  it("lists the replay's dead run alone; the original's keyed repeat answers its replay (200), and the chain replays on", async () => {
    const { jobId } = await deadRunVia(api, KEY_A);
    const dead = await deadOf(jobId);
    const replay = (runId: string, key: string) =>
      api.call("POST", `/dead-letters/${runId}/replay`, { headers: { "Idempotency-Key": key } });
    const first = await replay(dead.runId, "chain-1");
    expect(first.status, first.text).toBe(202);
    const r1 = RunSchema.parse(first.body);
    await runOnce(api, jobId);
    const r1Dead = await deadOf(jobId);
    expect(r1Dead).toMatchObject({ runId: r1.runId, attempt: 2 });
    const listed = await allDeadLetters(KEY_A);
    expect(listed).toContain(r1.runId);
    expect(listed).not.toContain(dead.runId);
    const repeat = await replay(dead.runId, "chain-1");
    expect(repeat.status, repeat.text).toBe(200);
    expect(RunSchema.parse(repeat.body).runId).toBe(r1.runId);
    // The same key on the next link is another dead run's replay: it replays that one.
    const second = await replay(r1.runId, "chain-1");
    expect(second.status, second.text).toBe(202);
    expect(RunSchema.parse(second.body)).toMatchObject({ attempt: 3, status: "queued" });
  });
});

describe("webhook secrets under attack", () => {
  /** A receiver holding `secret` (standardwebhooks) given a delivery signed now by `signers`. */
  const verifies = (secret: string, signers: readonly string[]) => {
    const [id, timestamp, body] = [
      "01ABC@2030-01-01T00:00:00.000Z",
      Math.floor(Date.now() / 1000),
      "{}",
    ];
    const webhookHeaders = {
      "webhook-id": id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": webhookSignature(signers, id, timestamp, body),
    };
    return verifyDelivery(secret, { body, webhookHeaders, idempotencyKey: id });
  };

  it("two tenants' first deliveries at once through one worker cache, no secret stored yet, each signed with its own only", async () => {
    const engine = api.fixture.engine;
    const cache = cachedSigningSecrets(engine);
    const [a, b] = [`h76-a-${Date.now()}`, `h76-b-${Date.now()}`];
    const signed = await Promise.all([cache(a), cache(b), cache(a), cache(b)]);
    const storedA = await readWebhookSecrets(engine, a);
    const storedB = await readWebhookSecrets(engine, b);
    if (!storedA || !storedB) throw new Error("no secret stored");
    expect(signed[0]).toEqual([storedA.current]);
    expect(signed[2]).toEqual([storedA.current]);
    expect(signed[1]).toEqual([storedB.current]);
    expect(verifies(storedB.current, signed[0] ?? [])).toBe(false);
    expect(verifies(storedA.current, signed[1] ?? [])).toBe(false);
  });

  it("rotations at once with different keys: each answered secret verifies deliveries signed now, and the stored secrets are the answered ones", async () => {
    const secretOf = async (key: string) =>
      WebhookSecretSchema.parse((await api.call("GET", "/webhook-secret", { key })).body).secret;
    await secretOf(KEY_B);
    const answers = await Promise.all(
      ["k1", "k2"].map((k) =>
        api.call("POST", "/webhook-secret/rotate", {
          key: KEY_B,
          headers: { "Idempotency-Key": `${k}-${Date.now()}` },
        }),
      ),
    );
    for (const a of answers) expect(a.status, a.text).toBe(200);
    const secrets = answers.map((a) => WebhookSecretSchema.parse(a.body).secret);
    expect(new Set(secrets).size).toBe(2);
    const stored = await readWebhookSecrets(api.fixture.engine, "tenant-b");
    if (!stored) throw new Error("no secret");
    const signers = signingSecrets(stored, new Date());
    for (const secret of secrets) expect(verifies(secret, signers)).toBe(true);
    expect(signers).toHaveLength(2);
  });
});
