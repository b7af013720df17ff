import { Wakeup } from "../concurrency.js";
import { PRIORITIES, type Priority } from "../model.js";
import type { ReceivedRun } from "../queue/work-queue.js";

/**
 * The idle wait of a loop whose queues all came back empty: every queue long-polled at once, so a
 * run sent to any of them starts as soon as it is visible, none waiting out another queue's poll
 * (short polls instead kept a fifth of a core busy in the sandbox, whose emulator runs in its
 * process; on AWS each is a billed request). Each poll asks for a share of what is free; the first
 * batch is the loop's answer, one that comes after it is taken as it comes. A queue whose poll is
 * still out is not polled again, so a trickle of runs does not pile polls up.
 */
export class IdleWait {
  private readonly out = new Set<Priority>();
  private readonly polled = new Wakeup();

  constructor(
    private readonly seconds: number,
    private readonly take: (batch: readonly ReceivedRun[]) => void,
  ) {}

  /** Once no poll is out: a stopping loop takes what the last ones brought before it waits for its runs. */
  async drained(): Promise<void> {
    while (this.out.size > 0) await this.polled.wait();
  }

  async next(
    receive: (priority: Priority, count: number, seconds: number) => Promise<ReceivedRun[] | null>,
    max: number,
  ): Promise<ReceivedRun[]> {
    const queues = PRIORITIES.filter((priority) => !this.out.has(priority));
    if (queues.length === 0) {
      await this.polled.wait();
      return [];
    }
    return new Promise((answer) => {
      let left = queues.length;
      let answered = false;
      queues.forEach((priority, index) => {
        this.out.add(priority);
        void receive(priority, shareOf(max, index, queues.length), this.seconds).then((batch) => {
          this.out.delete(priority);
          left -= 1;
          if (batch !== null && batch.length > 0) {
            if (answered) this.take(batch);
            else {
              answered = true;
              answer(batch);
            }
          } else if (left === 0 && !answered) {
            answered = true;
            answer([]);
          }
          this.polled.notify();
        });
      });
    });
  }
}

/** Part `index` of `total` split into `parts` nearly equal parts, the larger first; at least 1. */
function shareOf(total: number, index: number, parts: number): number {
  return Math.max(1, Math.floor(total / parts) + (index < total % parts ? 1 : 0));
}
