import { App } from "aws-cdk-lib";
import { describe, expect, it } from "vitest";
import { CONTEXT_KEYS, settingsFromContext } from "../../infra/settings.js";

/**
 * `cdk deploy -c key=$VAR` with the variable unset gives the CDK CLI `key=`, which it passes on as
 * the context value "" (it splits the assignment at its first "="). Taken as "not given", the
 * setting would silently go back to its default; docs/deploy.md ("Settings") says an empty value
 * stops the synth naming the setting, as an out-of-range one does (adversarial review h78).
 */
const fromContext = (context: Record<string, string>) =>
  settingsFromContext(new App({ context }).node);

describe("a setting given an empty value on the command line", () => {
  it.each([
    // A stage script's `-c stage=$STAGE`: would deploy (or update) the dev stack, whose tables
    // are deleted with it, instead of refusing.
    ["stage"],
    // `-c quotaConcurrentRuns=$LIMIT`: would serve every tenant without the limit.
    ["quotaConcurrentRuns"],
    // `-c shardCount=$SHARDS`: 8 shards, whatever the stage ran with.
    ["shardCount"],
    // `-c workerTimeoutSeconds=$T`: back to 900 s.
    ["workerTimeoutSeconds"],
  ])("%s= stops the synth, naming the setting", (key) => {
    expect(() => fromContext({ [key]: "" })).toThrow(key);
  });

  it("is refused for every setting, and so is a value of blanks", () => {
    for (const key of CONTEXT_KEYS) {
      expect(() => fromContext({ [key]: "" }), key).toThrow(`context ${key} is empty`);
      expect(() => fromContext({ [key]: "  " }), key).toThrow(`context ${key} is empty`);
    }
  });
});
