import { afterAll, beforeAll, expect, it } from "vitest";
import { SchedulerClient } from "../../client/index.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { type ApiHarness, KEY_A, laterJob, startApi } from "../api/support.js";

/**
 * An id the client puts in a path is one segment of it: `encodeURIComponent` leaves "." and ".."
 * as they are, and the URL then resolves them (as it does their escaped forms, `%2e%2e`), so a run
 * id ".." given to a run's cancel named the job's cancel: the request went to another route, with
 * the caller's credentials, and did what that route does.
 */
let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

/** What a call came to: its answer's kind, or the error it was refused with. */
async function outcome(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return "answered";
  } catch (error) {
    return error instanceof Error ? error.name : "thrown";
  }
}

it("a dot segment as an id sends no request to another route: a run's cancel is not its job's", async () => {
  const job = JobSchema.parse((await api.call("POST", "/jobs", { body: laterJob() })).body);
  const sent: string[] = [];
  const watching = new SchedulerClient({
    baseUrl: api.server.url,
    auth: { kind: "bearer", key: KEY_A },
    fetch: (input, init) => {
      const request = new Request(input, init);
      sent.push(`${request.method} ${new URL(request.url).pathname}`);
      return fetch(input, init);
    },
  });
  const answered: string[] = [];
  for (const id of ["", ".", ".."]) {
    const calls = {
      "runs.cancel": () => watching.runs.cancel(job.id, id),
      "runs.get": () => watching.runs.get(job.id, id),
      "runs.page": () => watching.runs.page(id),
      "deadLetters.replay": () => watching.deadLetters.replay(id),
      "quotas.getTenant": () => watching.quotas.getTenant(id),
      "quotas.setTenant": () => watching.quotas.setTenant(id, {}),
      "jobs.handle.cancel": () => watching.jobs.handle(id).cancel(),
      completeRun: () => watching.completeRun(id, "rt2.1.token", { status: "succeeded" }),
    };
    for (const [name, call] of Object.entries(calls)) {
      const came = await outcome(call());
      if (came !== "RangeError") answered.push(`${name}(${id}): ${came}`);
    }
  }
  const { status } = JobSchema.parse((await api.call("GET", `/jobs/${job.id}`)).body);
  expect({ answered, sent, status }).toEqual({ answered: [], sent: [], status: "active" });
});
