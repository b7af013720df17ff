import { useEffect, useState } from "preact/hooks";
import { api, type CreateJob, type FieldIssue, type Job, type Preview } from "./api.js";
import { Field } from "./components.js";
import { formatOccurrence, listOf } from "./format.js";

type Schedule = CreateJob["schedule"];
type AfterOn = NonNullable<Extract<Job["schedule"], { after: unknown }>["after"]["on"]>;

/** A job's schedule in the create and edit forms: each kind's text as typed, kept while another kind is picked. */
export interface ScheduleForm {
  scheduleKind: "cron" | "runAt" | "every" | "after";
  cron: string;
  timezone: string;
  runAt: string;
  every: string;
  startAt: string;
  /** The upstream job ids of an `after` schedule, as typed: separated by commas, spaces or lines. */
  afterJobs: string;
  afterOn: AfterOn;
}

type ScheduleText = Exclude<keyof ScheduleForm, "scheduleKind" | "afterOn">;

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

export function emptyScheduleForm(): ScheduleForm {
  return {
    scheduleKind: "cron",
    cron: "0 9 * * 1-5",
    timezone: browserZone(),
    runAt: nextMinuteHere(),
    every: "PT15M",
    startAt: "",
    afterJobs: "",
    afterOn: "success",
  };
}

export function scheduleFormOf(s: Job["schedule"]): ScheduleForm {
  return {
    scheduleKind: "cron" in s ? "cron" : "runAt" in s ? "runAt" : "after" in s ? "after" : "every",
    cron: "cron" in s ? s.cron : "",
    timezone: "cron" in s ? s.timezone : browserZone(),
    runAt: "runAt" in s ? s.runAt : "",
    every: "every" in s ? s.every : "",
    startAt: "every" in s ? (s.startAt ?? "") : "",
    afterJobs: "after" in s ? s.after.jobs.join(", ") : "",
    afterOn: "after" in s ? (s.after.on ?? "success") : "success",
  };
}

/**
 * The ids as the API stores them, each once and sorted, so ids typed in another order or twice
 * are the schedule the job has, not an edit of it.
 */
const upstreamIds = (text: string) =>
  [...new Set(text.split(/[\s,]+/).filter((id) => id !== ""))].sort();

export function scheduleOf(form: ScheduleForm): Schedule {
  if (form.scheduleKind === "cron")
    return { cron: form.cron.trim(), timezone: form.timezone.trim() };
  if (form.scheduleKind === "runAt") return { runAt: form.runAt.trim() };
  if (form.scheduleKind === "after")
    return { after: { jobs: upstreamIds(form.afterJobs), on: form.afterOn } };
  return form.startAt.trim() === ""
    ? { every: form.every.trim() }
    : { every: form.every.trim(), startAt: form.startAt.trim() };
}

const KINDS = [
  ["cron", "Cron, in a time zone"],
  ["runAt", "Once"],
  ["every", "Every fixed interval"],
  ["after", "After other jobs"],
] as const;

const AFTER_ON: readonly (readonly [AfterOn, string])[] = [
  ["success", "succeeds (success)"],
  ["failure", "fails for good: ends dead (failure)"],
  ["completion", "ends, succeeded or dead (completion)"],
];

/** The schedule's fieldset: its kind, that kind's fields, and what the schedule would run. */
export function ScheduleFields(props: {
  form: ScheduleForm;
  onChange: (changed: Partial<ScheduleForm>) => void;
  issues: readonly FieldIssue[];
}) {
  const { form, issues, onChange } = props;
  const text = (key: ScheduleText, field: string, label: string, hint: string) => (
    <Field field={field} label={label} issues={issues} hint={hint}>
      {(attrs) => (
        <input
          {...attrs}
          name={key}
          type="text"
          value={form[key]}
          onInput={(event) => onChange({ [key]: event.currentTarget.value })}
        />
      )}
    </Field>
  );
  return (
    <fieldset>
      <legend>Schedule</legend>
      {KINDS.map(([kind, label]) => (
        <label key={kind} class="inline">
          <input
            type="radio"
            name="scheduleKind"
            value={kind}
            checked={form.scheduleKind === kind}
            onChange={() => onChange({ scheduleKind: kind })}
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
          {text("startAt", "schedule.startAt", "Starting at (optional)", "ISO-8601; default now.")}
        </>
      ) : null}
      {form.scheduleKind === "after" ? (
        <>
          {text(
            "afterJobs",
            "schedule.after.jobs",
            "Upstream job ids",
            "1 to 20 ids of your jobs, separated by commas or spaces.",
          )}
          <Field field="schedule.after.on" label="Runs when an upstream run" issues={issues}>
            {(attrs) => (
              <select
                {...attrs}
                name="afterOn"
                value={form.afterOn}
                onChange={(event) => onChange({ afterOn: event.currentTarget.value as AfterOn })}
              >
                {AFTER_ON.map(([on, label]) => (
                  <option key={on} value={on}>
                    {label}
                  </option>
                ))}
              </select>
            )}
          </Field>
        </>
      ) : null}
      <SchedulePreview schedule={scheduleOf(form)} />
    </fieldset>
  );
}

/** When a job after other jobs runs: it has no times of its own, so no occurrence says it. */
export function afterInWords(after: { jobs: readonly string[]; on?: AfterOn | undefined }): string {
  const how = AFTER_ON.find(([on]) => on === (after.on ?? "success"))?.[1] ?? "";
  return `No times of its own: it runs once for each run of ${listOf(after.jobs)} that ${how}.`;
}

/**
 * The next occurrences of the schedule being typed, from POST /schedules/preview; for an `after`
 * schedule, which has none, when it runs, once the preview has taken its upstreams.
 */
function SchedulePreview({ schedule }: { schedule: Schedule }) {
  const [previewed, setPreviewed] = useState<{ key: string; preview: Preview } | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const key = JSON.stringify(schedule);
  useEffect(() => {
    let cancelled = false;
    const timer = setTimeout(() => {
      api.previewSchedule({ schedule, count: 5 }).then(
        (preview) => {
          if (cancelled) return;
          setPreviewed({ key, preview });
          setProblem(null);
        },
        (error: unknown) => {
          if (cancelled) return;
          setPreviewed(null);
          setProblem(error instanceof Error ? error.message : String(error));
        },
      );
    }, 300);
    return () => {
      cancelled = true;
      clearTimeout(timer);
    };
  }, [key]);
  // Until the schedule as it is now is previewed, the last preview is shown only for a schedule of
  // times (its occurrences, soon replaced); an `after` schedule's words wait for its upstreams' check.
  const shown = previewed?.preview ?? null;
  return (
    <section class="preview" aria-labelledby="schedule-preview-title" aria-live="polite">
      <h3 id="schedule-preview-title">Next runs of this schedule</h3>
      {problem ? <p class="hint">{problem}</p> : null}
      {"after" in schedule ? (
        previewed?.key === key ? (
          <p>{afterInWords(schedule.after)}</p>
        ) : null
      ) : shown ? (
        <ol>
          {shown.occurrences.map((o) => (
            <li key={o.utc}>
              <time dateTime={o.utc}>{formatOccurrence(o, shown.timezone)}</time>
            </li>
          ))}
        </ol>
      ) : null}
    </section>
  );
}
