import type { CancelSource } from "./model.js";

/** The reason a cancelled run records, by who cancelled it. */
export const CANCEL_REASONS: Readonly<Record<CancelSource, string>> = {
  api: "run cancelled",
  "job-cancel": "job cancelled",
  pause: "job paused with running: cancel",
};
