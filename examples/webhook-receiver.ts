import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";

// A webhook receiver for `http` jobs: checks the signature, refuses stale deliveries, and applies
// each occurrence once however often it is delivered (the scheduler runs at least once).
// Run: node --import tsx examples/webhook-receiver.ts   (PORT=4000; FAIL=1 answers 500 to every delivery)
const secret = process.env.WEBHOOK_SECRET ?? readFileSync(".data/webhook-secret", "utf8").trim();
const applied = new Set<string>(); // use a database table with a unique key in production

createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    const [, t = "", v1 = ""] =
      /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(req.headers["x-scheduler-signature"])) ?? [];
    const expected = createHmac("sha256", secret).update(`${t}.${body}`).digest();
    const valid = v1.length === 64 && timingSafeEqual(expected, Buffer.from(v1, "hex"));
    if (!valid || Math.abs(Date.now() / 1000 - Number(t)) > 300)
      return res.writeHead(401).end("bad signature");
    if (process.env.FAIL) return res.writeHead(500).end("failing on purpose");
    const key = String(req.headers["idempotency-key"]);
    const first = !applied.has(key);
    if (first) applied.add(key); // ...do the work here, once per occurrence
    console.log(
      `${first ? "applied" : "duplicate"} ${key} attempt ${req.headers["x-scheduler-attempt"]}: ${body}`,
    );
    res.writeHead(200).end("ok");
  });
}).listen(Number(process.env.PORT ?? 4000), () =>
  console.log(`receiver on :${process.env.PORT ?? 4000}`),
);
