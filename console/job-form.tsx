import { useEffect, useState } from "preact/hooks";
import {
  ApiProblem,
  api,
  type CreateJob,
  type EditJob,
  type FieldIssue,
  type Job,
  type Preview,
} from "./api.js";
import { Field } from "./components.js";
import { formatOccurrence } from "./format.js";

/** What the create and edit forms hold: text as typed, turned into a request body on submit. */
export interface JobForm {
  name: string;
  type: string;
  scheduleKind: "cron" | "runAt" | "every";
  cron: string;
  timezone: string;
  runAt: string;
  every: string;
  startAt: string;
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

/** The form's fields that are text as typed (all but targetKept). */
type TextField = Exclude<keyof JobForm, "scheduleKind" | "targetKept">;

const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

/** The next whole minute with the browser's UTC offset, e.g. 2030-01-15T09:31:00+01:00. */
function nextMinuteHere(): string {
  const at = new Date(Math.ceil((Date.now() + 60_000) / 60_000) * 60_000);
  const offset = -at.getTimezoneOffset();
  const local = new Date(at.getTime() + offset * 60_000).toISOString().slice(0, 19);
  const sign = offset >= 0 ? "+" : "-";
  const hours = String(Math.floor(Math.abs(offset) / 60)).padStart(2, "0");
  const minutes = String(Math.abs(offset) % 60).padStart(2, "0");
  return `${local}${sign}${hours}:${minutes}`;
}

export function emptyForm(type: string): JobForm {
  return {
    name: "",
    type,
    scheduleKind: "cron",
    cron: "0 9 * * 1-5",
    timezone: browserZone(),
    runAt: nextMinuteHere(),
    every: "PT15M",
    startAt: "",
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
  const s = job.schedule;
  return {
    name: job.name,
    type: job.type,
    scheduleKind: "cron" in s ? "cron" : "runAt" in s ? "runAt" : "every",
    cron: "cron" in s ? s.cron : "",
    timezone: "cron" in s ? s.timezone : browserZone(),
    runAt: "runAt" in s ? s.runAt : "",
    every: "every" in s ? s.every : "",
    startAt: "every" in s ? (s.startAt ?? "") : "",
    targetUrl: job.target?.url ?? "",
    targetKept: keptOf(job.target),
    payload:
      job.payload === null || job.payload === undefined ? "" : JSON.stringify(job.payload, null, 2),
    maxAttempts: String(job.policies.retry.maxAttempts),
    misfirePolicy: job.policies.misfirePolicy,
    overlapPolicy: job.policies.overlapPolicy,
    priority: job.priority,
    timeoutSeconds: String(job.timeoutSeconds),
    window: job.window ?? "",
  };
}

function keptOf(target: Job["target"]): TargetKept {
  if (target === undefined || target === null) return {};
  const { url: _shown, ...kept } = target;
  return kept;
}

type Schedule = CreateJob["schedule"];

function scheduleOf(form: JobForm): Schedule {
  if (form.scheduleKind === "cron")
    return { cron: form.cron.trim(), timezone: form.timezone.trim() };
  if (form.scheduleKind === "runAt") return { runAt: form.runAt.trim() };
  return form.startAt.trim() === ""
    ? { every: form.every.trim() }
    : { every: form.every.trim(), startAt: form.startAt.trim() };
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
    return JSON.parse(text) as unknown;
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
    if (JSON.stringify(value) !== JSON.stringify(before[part])) changes[part] = value;
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

/** The next occurrences of the schedule being typed, from POST /schedules/preview. */
function SchedulePreview({ schedule }: { schedule: Schedule }) {
  const [preview, setPreview] = useState<Preview | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const key = JSON.stringify(schedule);
  useEffect(() => {
    let cancelled = false;
    const timer = setTimeout(() => {
      api.previewSchedule({ schedule, count: 5 }).then(
        (result) => {
          if (cancelled) return;
          setPreview(result);
          setProblem(null);
        },
        (error: unknown) => {
          if (cancelled) return;
          setPreview(null);
          setProblem(error instanceof Error ? error.message : String(error));
        },
      );
    }, 300);
    return () => {
      cancelled = true;
      clearTimeout(timer);
    };
  }, [key]);
  return (
    <section class="preview" aria-labelledby="schedule-preview-title" aria-live="polite">
      <h3 id="schedule-preview-title">Next runs of this schedule</h3>
      {problem ? <p class="hint">{problem}</p> : null}
      {preview ? (
        <ol>
          {preview.occurrences.map((o) => (
            <li key={o.utc}>
              <time dateTime={o.utc}>{formatOccurrence(o, preview.timezone)}</time>
            </li>
          ))}
        </ol>
      ) : null}
    </section>
  );
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
      <fieldset>
        <legend>Schedule</legend>
        {(
          [
            ["cron", "Cron, in a time zone"],
            ["runAt", "Once"],
            ["every", "Every fixed interval"],
          ] as const
        ).map(([kind, label]) => (
          <label key={kind} class="inline">
            <input
              type="radio"
              name="scheduleKind"
              value={kind}
              checked={form.scheduleKind === kind}
              onChange={() => props.onChange({ ...form, scheduleKind: kind })}
            />{" "}
            {label}
          </label>
        ))}
        {form.scheduleKind === "cron" ? (
          <>
            {text(
              "cron",
              "schedule.cron",
              "Cron expression",
              "5 fields (minute hour day month weekday), or 6 with seconds first.",
            )}
            {text(
              "timezone",
              "schedule.timezone",
              "Time zone",
              "An IANA zone, e.g. Europe/Berlin or UTC.",
            )}
          </>
        ) : null}
        {form.scheduleKind === "runAt"
          ? text(
              "runAt",
              "schedule.runAt",
              "Run at",
              "ISO-8601 with an offset, e.g. 2030-01-15T09:00:00+01:00.",
            )
          : null}
        {form.scheduleKind === "every" ? (
          <>
            {text("every", "schedule.every", "Every", "An ISO-8601 duration, e.g. PT15M or P1D.")}
            {text(
              "startAt",
              "schedule.startAt",
              "Starting at (optional)",
              "ISO-8601; default now.",
            )}
          </>
        ) : null}
        <SchedulePreview schedule={scheduleOf(form)} />
      </fieldset>
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
