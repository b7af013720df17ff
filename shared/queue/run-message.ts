import type { Priority } from "../model.js";

/** The body of a work-queue message: enough to find the run and to check the job version without a read. */
export interface RunMessage {
  readonly jobId: string;
  readonly scheduledFor: string;
  /** When the run should start; a message that arrives early waits for it. */
  readonly dueAt: string;
  readonly attempt: number;
  readonly jobVersion: number;
  readonly priority: Priority;
  /**
   * The run's fence when this message was sent: starts beyond it happened while the message was
   * out, which is how the redrive DLQ consumer tells a run that crashed its workers from a message
   * whose deliveries never started it. Absent (0) for a run not yet started.
   */
  readonly fence?: number;
  /**
   * The job's tenant: the message's `MessageGroupId` (SQS fair queues) and what the worker loop
   * takes turns between. Empty in a message sent before the field existed.
   */
  readonly tenantId: string;
  /**
   * When the run began waiting for its tenant's concurrent-runs quota in a worker loop that handed
   * the message back to SQS (its tenant's gate full, hand-back.ts): the worker that takes it again,
   * a loop or the Lambda worker, counts the wait since as the quota's, not as lateness, up to the
   * longest hand-back delay after it was sent (`quotaWaitStart`). Absent on every other message.
   */
  readonly quotaWaitSince?: string;
}
