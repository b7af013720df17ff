import { describe, expect, it } from "vitest";
import { type TimeLimit, timeLimit } from "../../shared/time-limit.js";
import { collector } from "../support/collector.js";

/** `reads` waits within `limit`, each settling with a 1-byte chunk: weak references to the chunks. */
async function readsWithin(limit: TimeLimit, reads: number): Promise<WeakRef<Uint8Array>[]> {
  const chunks: WeakRef<Uint8Array>[] = [];
  for (let read = 0; read < reads; read++) {
    const chunk = new Uint8Array(1);
    chunks.push(new WeakRef(chunk));
    await limit.within(Promise.resolve(chunk));
  }
  return chunks;
}

describe("a time limit waited on many times (a delivery's reads of a body in 1-byte chunks)", () => {
  it("holds nothing of a wait once it is over, while the limit lasts", async () => {
    const gc = collector();
    const limit = timeLimit(60_000);
    try {
      const chunks = await readsWithin(limit, 1000);
      gc();
      await new Promise((resolve) => setTimeout(resolve, 0));
      gc();
      expect(chunks.filter((chunk) => chunk.deref() !== undefined)).toHaveLength(0);
    } finally {
      limit.end();
    }
  });
});

describe("a time limit's waits", () => {
  it("end when the time is up, with a TimeoutError, the limit expired and its signal aborted", async () => {
    const limit = timeLimit(50);
    try {
      const wait = limit.within(new Promise<never>(() => undefined));
      await expect(wait).rejects.toMatchObject({ name: "TimeoutError" });
      expect(limit.expired).toBe(true);
      expect(limit.signal.aborted).toBe(true);
    } finally {
      limit.end();
    }
  });

  it("end when the parent aborts first, with the parent's reason, the limit not expired", async () => {
    const parent = new AbortController();
    const limit = timeLimit(60_000, parent.signal);
    try {
      const wait = limit.within(new Promise<never>(() => undefined));
      const cancel = new Error("cancelled by alice");
      parent.abort(cancel);
      await expect(wait).rejects.toBe(cancel);
      expect(limit.expired).toBe(false);
      await expect(limit.within(Promise.resolve("late"))).rejects.toBe(cancel);
      // A read begun after the abort that fails (the connection reset) is waited on no more,
      // and its failure is handled, not left to the process's unhandled rejections.
      await expect(limit.within(Promise.reject(new Error("other side closed")))).rejects.toBe(
        cancel,
      );
      await new Promise((resolve) => setTimeout(resolve, 10));
    } finally {
      limit.end();
    }
  });

  it("settle with what they wait for, its failure too, and stop following the parent once ended", async () => {
    const parent = new AbortController();
    const limit = timeLimit(60_000, parent.signal);
    await expect(limit.within(Promise.resolve("answer"))).resolves.toBe("answer");
    const reset = new Error("other side closed");
    await expect(limit.within(Promise.reject(reset))).rejects.toBe(reset);
    limit.end();
    parent.abort(new Error("after the wait"));
    expect(limit.signal.aborted).toBe(false);
  });
});
