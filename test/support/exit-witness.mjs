// Preloaded (`node --import`) into a bin a test spawns (cli-run.ts, spawnWitnessed): tells the test
// on fd 3, as the process exits, how it ended, from inside, so that the test need not time it.
// `drained`: the event loop ran out of work ('beforeExit'), so nothing called process.exit: not
// bin/scheduler.mjs's own exit 2 s after Ctrl-C. `timersAfterCommand`: callbacks of ref'd timers
// (timers that keep the process alive) that ran once process.exitCode was set, which the bin does
// when runCli returns; a command that ended leaves none behind.
import { createHook } from "node:async_hooks";
import { writeSync } from "node:fs";

/** Each live timer by its async id. */
const timers = new Map();
let timersAfterCommand = 0;
createHook({
  init(asyncId, type, _triggerAsyncId, resource) {
    if (type === "Timeout") timers.set(asyncId, resource);
  },
  before(asyncId) {
    if (process.exitCode !== undefined && timers.get(asyncId)?.hasRef() === true)
      timersAfterCommand += 1;
  },
  destroy(asyncId) {
    timers.delete(asyncId);
  },
}).enable();

let drained = false;
process.once("beforeExit", () => {
  drained = true;
});
process.once("exit", () => {
  writeSync(3, JSON.stringify({ drained, timersAfterCommand }));
});
