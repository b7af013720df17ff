import { readJson, writeJson } from "../client/exact-json.js";
import { ApiProblem, type CreateJob, type EditJob, type FieldIssue, type Job } from "./api.js";
import { Field } from "./components.js";
import {
  emptyScheduleForm,
  ScheduleFields,
  type ScheduleForm,
  scheduleFormOf,
  scheduleOf,
} from "./schedule-form.js";

/** What the create and edit forms hold: text as typed, turned into a request body on submit. */
export interface JobForm extends ScheduleForm {
  name: string;
  type: string;
  targetUrl: string;
  /**
   * The target's parts the form does not show: its headers (often the receiver's credentials), its
   * delivery timeout and its mode. PATCH replaces a job's whole target, so an edit of the URL sends
   * them with it, as they were.
   */
  targetKept: TargetKept;
  payload: string;
  maxAttempts: string;
  misfirePolicy: string;
  overlapPolicy: string;
  priority: string;
  timeoutSeconds: string;
  window: string;
}

type TargetKept = Omit<NonNullable<Job["target"]>, "url">;

/** The form's fields of the job's own that are text as typed (the schedule's are ScheduleFields'). */
type TextField = Exclude<keyof JobForm, keyof ScheduleForm | "targetKept">;

export function emptyForm(type: string): JobForm {
  return {
    name: "",
    type,
    ...emptyScheduleForm(),
    targetUrl: "",
    targetKept: {},
    payload: "",
    maxAttempts: "",
    misfirePolicy: "",
    overlapPolicy: "",
    priority: "",
    timeoutSeconds: "",
    window: "",
  };
}

export function formFromJob(job: Job): JobForm {
  return {
    name: job.name,
    type: job.type,
    ...scheduleFormOf(job.schedule),
    targetUrl: job.target?.url ?? "",
    targetKept: keptOf(job.target),
    payload: job.payload === null || job.payload === undefined ? "" : writeJson(job.payload, 2),
    maxAttempts: String(job.policies.retry.maxAttempts),
    misfirePolicy: job.policies.misfirePolicy,
    overlapPolicy: job.policies.overlapPolicy,
    priority: job.priority,
    timeoutSeconds: String(job.timeoutSeconds),
    window: job.window ?? "",
  };
}

/**
 * `changes` as applied to `job` as it now is (an edit conflict's "apply mine"): the form edits a
 * target's URL only, so the rest of the target (headers, timeout, mode) is `job`'s, not the parts
 * the form was opened with, which would put back a credential someone rotated meanwhile.
 */
export function changesOnto(changes: EditJob, job: Job): EditJob {
  if (changes.target === undefined || changes.target === null) return changes;
  return { ...changes, target: { ...keptOf(job.target), url: changes.target.url } };
}

function keptOf(target: Job["target"]): TargetKept {
  if (target === undefined || target === null) return {};
  const { url: _shown, ...kept } = target;
  return kept;
}

/** Checks the API cannot do because they happen in the browser: JSON that does not parse, numbers that are not. */
class FormProblem extends Error {
  constructor(readonly issues: FieldIssue[]) {
    super(issues.map((i) => `${i.field}: ${i.message}`).join("; "));
  }
}

function parsePayload(text: string): unknown {
  if (text.trim() === "") return undefined;
  try {
    // A number a double would change (a 64-bit id) keeps its digits, shown and sent as typed.
    return readJson(text);
  } catch {
    throw new FormProblem([{ field: "payload", message: "is not valid JSON" }]);
  }
}

function parseWhole(field: string, text: string): number | undefined {
  if (text.trim() === "") return undefined;
  const value = Number(text);
  if (!Number.isInteger(value))
    throw new FormProblem([{ field, message: "must be a whole number" }]);
  return value;
}

/**
 * What the form edits: the end conditions (null removes one on edit) are not among them, and a
 * window is set or changed, not removed (null), so a create body can take the same parts.
 */
type FormParts = Omit<EditJob, "endAt" | "maxRuns" | "window"> & { window?: string };

/** The parts of a job the form edits, each as the API takes it; a part left empty is absent. */
function partsOf(form: JobForm): FormParts {
  const maxAttempts = parseWhole("retry.maxAttempts", form.maxAttempts);
  const timeoutSeconds = parseWhole("timeoutSeconds", form.timeoutSeconds);
  const payload = parsePayload(form.payload);
  return {
    ...(form.name.trim() !== "" ? { name: form.name.trim() } : {}),
    schedule: scheduleOf(form),
    ...(payload !== undefined ? { payload } : {}),
    ...(form.targetUrl.trim() !== ""
      ? { target: { ...form.targetKept, url: form.targetUrl.trim() } }
      : {}),
    ...(maxAttempts !== undefined ? { retry: { maxAttempts } } : {}),
    ...(form.misfirePolicy
      ? { misfirePolicy: form.misfirePolicy as EditJob["misfirePolicy"] }
      : {}),
    ...(form.overlapPolicy
      ? { overlapPolicy: form.overlapPolicy as EditJob["overlapPolicy"] }
      : {}),
    ...(form.priority ? { priority: form.priority as EditJob["priority"] } : {}),
    ...(timeoutSeconds !== undefined ? { timeoutSeconds } : {}),
    ...(form.window.trim() !== "" ? { window: form.window.trim() } : {}),
  };
}

export function createBody(form: JobForm): CreateJob {
  // The generated enum lists the types of the catalog it was generated from; a deployment's own
  // types come from the page's configuration, and the API refuses any it does not accept.
  return { ...partsOf(form), type: form.type as CreateJob["type"], schedule: scheduleOf(form) };
}

/** The edit an edit form asks for: only the parts that differ from the job it was opened on. */
export function changesBetween(base: JobForm, mine: JobForm): EditJob {
  const before = partsOf(base) as Record<string, unknown>;
  const after = partsOf(mine) as Record<string, unknown>;
  const changes: Record<string, unknown> = {};
  for (const [part, value] of Object.entries(after)) {
    if (writeJson(value) !== writeJson(before[part])) changes[part] = value;
  }
  return changes as EditJob;
}

export function issuesOf(error: unknown): FieldIssue[] {
  if (error instanceof FormProblem) return error.issues;
  if (error instanceof ApiProblem) {
    if (error.issues.length > 0) return [...error.issues];
    if (error.field) return [{ field: error.field, message: error.message }];
  }
  return [];
}

const MISFIRE = ["skip", "fire_once", "fire_all"];
const OVERLAP = ["skip", "buffer_one", "allow"];
const PRIORITY = ["high", "normal", "low"];

/** The fields of a job, for both create (type selectable) and edit (type fixed). */
export function JobFields(props: {
  form: JobForm;
  onChange: (form: JobForm) => void;
  issues: readonly FieldIssue[];
  jobTypes?: readonly string[];
}) {
  const { form, issues } = props;
  const set =
    <K extends keyof JobForm>(key: K) =>
    (event: Event) =>
      props.onChange({ ...form, [key]: (event.currentTarget as HTMLInputElement).value });
  const text = (key: TextField, field: string, label: string, hint?: string) => (
    <Field field={field} label={label} issues={issues} {...(hint ? { hint } : {})}>
      {(attrs) => <input {...attrs} name={key} type="text" value={form[key]} onInput={set(key)} />}
    </Field>
  );
  const choice = (key: TextField, field: string, label: string, values: string[]) => (
    <Field field={field} label={label} issues={issues}>
      {(attrs) => (
        <select {...attrs} name={key} value={form[key]} onChange={set(key)}>
          <option value="">default</option>
          {values.map((v) => (
            <option key={v} value={v}>
              {v}
            </option>
          ))}
        </select>
      )}
    </Field>
  );
  return (
    <>
      {text("name", "name", "Name", "Defaults to the type.")}
      {props.jobTypes ? (
        <Field field="type" label="Type" issues={issues}>
          {(attrs) => (
            <select {...attrs} name="type" value={form.type} onChange={set("type")}>
              {props.jobTypes?.map((t) => (
                <option key={t} value={t}>
                  {t}
                </option>
              ))}
            </select>
          )}
        </Field>
      ) : null}
      <ScheduleFields
        form={form}
        onChange={(changed) => props.onChange({ ...form, ...changed })}
        issues={issues}
      />
      {form.type === "http"
        ? text(
            "targetUrl",
            "target.url",
            "Webhook URL",
            "http:// or https://; the payload is POSTed there.",
          )
        : null}
      <Field
        field="payload"
        label="Payload (JSON)"
        hint="Optional; handed to the handler."
        issues={issues}
      >
        {(attrs) => (
          <textarea
            {...attrs}
            name="payload"
            rows={4}
            value={form.payload}
            onInput={set("payload")}
          />
        )}
      </Field>
      <fieldset>
        <legend>Policies</legend>
        {text("maxAttempts", "retry.maxAttempts", "Attempts in all", "1 to 100; default 5.")}
        {choice("misfirePolicy", "misfirePolicy", "Missed occurrences", MISFIRE)}
        {choice("overlapPolicy", "overlapPolicy", "While a run is still running", OVERLAP)}
        {choice("priority", "priority", "Priority", PRIORITY)}
        {text("timeoutSeconds", "timeoutSeconds", "Timeout (seconds)", "Default 300.")}
        {text(
          "window",
          "window",
          "Jitter window",
          "Optional ISO-8601 duration such as PT5M: each run starts at a stable offset inside it.",
        )}
      </fieldset>
    </>
  );
}
