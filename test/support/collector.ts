import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/**
 * V8's collector, for a test that runs it to see what is still held (a cache's heap, what is held
 * only weakly). Exposed in a fresh context, so the test process needs no `--expose-gc`.
 */
export function collector(): () => void {
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}
