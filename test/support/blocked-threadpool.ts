import { spawnSync } from "node:child_process";
import { closeSync, constants, mkdtempSync, openSync, rmSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** libuv's threadpool size in this process (4 unless UV_THREADPOOL_SIZE says otherwise). */
const POOL_SIZE = Number(process.env.UV_THREADPOOL_SIZE) || 4;

export interface BlockedThreadpool {
  /** Lets every blocked read finish (each FIFO opened for writing and closed: EOF) and cleans up. */
  release(): Promise<void>;
}

/**
 * Takes every thread of libuv's pool, deterministically: one `readFile` per thread of a FIFO
 * (`mkfifo`) that nobody opens for writing yet, so each thread waits in `open()` until `release`.
 * Until then nothing else on the pool runs in this process: fs, zlib, crypto's async work and
 * `dns.lookup` (getaddrinfo). Checks that it worked: an fs `stat` must not finish within 300 ms.
 */
export async function blockThreadpool(): Promise<BlockedThreadpool> {
  const dir = mkdtempSync(join(tmpdir(), "threadpool-"));
  const fifos = Array.from({ length: POOL_SIZE }, (_, i) => join(dir, `fifo-${i}`));
  for (const fifo of fifos) {
    const made = spawnSync("mkfifo", [fifo]);
    if (made.status !== 0) throw new Error(`mkfifo ${fifo}: ${made.stderr.toString()}`);
  }
  const reads = fifos.map((fifo) => readFile(fifo));
  const probe = stat(dir);
  const release = async () => {
    // O_NONBLOCK: fails (ENXIO) instead of hanging if a read's open has not begun, which the
    // check below rules out; the main thread's open does not need the pool.
    for (const fifo of fifos) closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    await Promise.all(reads);
    await probe;
    rmSync(dir, { recursive: true, force: true });
  };
  const probed = await Promise.race([
    probe.then(() => "finished" as const),
    new Promise<"waiting">((resolve) => setTimeout(() => resolve("waiting"), 300)),
  ]);
  if (probed === "finished") {
    await release();
    throw new Error(`the threadpool was not blocked by ${POOL_SIZE} FIFO reads`);
  }
  return { release };
}
