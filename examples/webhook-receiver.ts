import { createServer, type IncomingMessage } from "node:http";
import { Webhook } from "standardwebhooks";

// A webhook receiver for `http` jobs: verifies each delivery (Standard Webhooks: the signature over
// "<webhook-id>.<webhook-timestamp>.<body>", a timestamp within five minutes) and applies each
// occurrence once however often it is delivered (the scheduler runs at least once).
// Run: WEBHOOK_SECRET=whsec_… node --import tsx examples/webhook-receiver.ts
//   (the secret from GET /webhook-secret; PORT=4000; FAIL=1 answers 500 to every delivery)
const secret = process.env.WEBHOOK_SECRET;
if (!secret?.startsWith("whsec_")) throw new Error("set WEBHOOK_SECRET to GET /webhook-secret's");
const webhook = new Webhook(secret);
const applied = new Set<string>(); // use a database table with a unique key in production

/** The delivery's payload; throws unless a signature matches and the timestamp is within five minutes. */
function verified(webhook: Webhook, req: IncomingMessage, rawBody: string): unknown {
  const header = (name: string) => String(req.headers[name] ?? "");
  return webhook.verify(rawBody, {
    "webhook-id": header("webhook-id"),
    "webhook-timestamp": header("webhook-timestamp"),
    "webhook-signature": header("webhook-signature"),
  });
}

createServer((req, res) => {
  // Decoded once, whole: a chunk ends wherever a TCP segment or TLS record did, also inside a
  // multi-byte character, which decoding each chunk on its own would garble (a bad signature).
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const header = (name: string) => String(req.headers[name] ?? "");
    const id = header("webhook-id");
    try {
      verified(webhook, req, body);
    } catch {
      return res.writeHead(401).end("bad signature");
    }
    if (process.env.FAIL) return res.writeHead(500).end("failing on purpose");
    // Deduplicate on the signed webhook-id (the occurrence key; Idempotency-Key carries the same
    // value), so a delivery replayed under another key is still the same occurrence.
    const first = !applied.has(id);
    if (first) applied.add(id); // ...do the work here, once per occurrence
    console.log(
      `${first ? "applied" : "duplicate"} ${id} attempt ${header("x-scheduler-attempt")}: ${body}`,
    );
    res.writeHead(200).end("ok");
  });
}).listen(Number(process.env.PORT ?? 4000), () =>
  console.log(`receiver on :${process.env.PORT ?? 4000}`),
);
