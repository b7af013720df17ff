import { fileURLToPath } from "node:url";

/**
 * The repository's root directory. A module of its own so that a test that only reads or runs
 * files of the repository (synth-offline runs `cdk synth` in a child process) does not import
 * synth.ts, which loads aws-cdk-lib, cdk-nag and the whole of infra/.
 */
export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
