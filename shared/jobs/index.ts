/** What can be done to a job: one module per operation. */

export { hasEnd } from "../model.js";
export { cancelJob } from "./cancel.js";
export { cancelRun } from "./cancel-run.js";
export {
  createJob,
  idempotentCreate,
  type NewJob,
  repeatAsOfCreate,
  requestHash,
} from "./create.js";
export { deleteJob } from "./delete.js";
export { editJob, type JobChanges } from "./edit.js";
export { pauseJob } from "./pause.js";
export { replayDeadLetter } from "./replay.js";
export { resumeJob } from "./resume.js";
export { triggerJob, triggerJobWithKey } from "./trigger.js";
