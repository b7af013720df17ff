import { type ComponentChildren, createContext } from "preact";
import { useContext, useEffect, useRef, useState } from "preact/hooks";
import { ApiProblem, type FieldIssue } from "./api.js";

/** Messages read out by screen readers (one polite live region for the whole console). */
const announcers = new Set<(message: string) => void>();
export function announce(message: string): void {
  for (const announcer of announcers) announcer(message);
}

export function Announcer() {
  const [message, setMessage] = useState("");
  useEffect(() => {
    announcers.add(setMessage);
    return () => announcers.delete(setMessage);
  }, []);
  // Shown for a while, then cleared, so the next message is read out even when it is the same.
  useEffect(() => {
    if (message === "") return;
    const timer = setTimeout(() => setMessage(""), 8000);
    return () => clearTimeout(timer);
  }, [message]);
  return (
    <p class="announcer" role="status" aria-live="polite">
      {message}
    </p>
  );
}

/** The server's poll interval for the live pages (ConsoleConfig.pollIntervalMs), if it sets one. */
export const LivePollInterval = createContext<number | undefined>(undefined);

/** How often a live page polls: every `defaultMs`, or as often as the server says. */
export function useLivePollInterval(defaultMs: number): number {
  return useContext(LivePollInterval) ?? defaultMs;
}

/**
 * Calls `load` now and every `intervalMs` while the tab is visible: the
 * console's live updates. (The API answers through API Gateway and Lambda,
 * which cannot hold a stream open, so the console polls.)
 */
export function usePoll<T>(
  load: () => Promise<T>,
  intervalMs: number,
  deps: readonly unknown[],
): { data: T | null; error: unknown; reload: () => Promise<void> } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const latest = useRef(load);
  latest.current = load;
  const generation = useRef(0);
  const underWay = useRef(0);
  const reload = async () => {
    const mine = ++generation.current;
    underWay.current++;
    try {
      const value = await latest.current();
      if (mine === generation.current) {
        setData(value);
        setError(null);
      }
    } catch (caught) {
      if (mine === generation.current) setError(caught);
    } finally {
      underWay.current--;
    }
  };
  useEffect(() => {
    setData(null);
    void reload();
    const timer = setInterval(() => {
      // A read still under way is let land: a poll started now would supersede it, and where each
      // answer takes longer than the interval (a slow network) none would ever be shown.
      if (document.visibilityState === "visible" && underWay.current === 0) void reload();
    }, intervalMs);
    return () => {
      clearInterval(timer);
      generation.current++;
    };
  }, deps);
  return { data, error, reload };
}

export function StatusBadge({ status }: { status: string }) {
  return <span class={`status status-${status}`}>{status}</span>;
}

export function messageOf(error: unknown): string {
  if (error instanceof ApiProblem) return error.message;
  return error instanceof Error ? error.message : String(error);
}

export function ErrorMessage({ error }: { error: unknown }) {
  if (error === null || error === undefined) return null;
  return (
    <p class="error" role="alert">
      {messageOf(error)}
    </p>
  );
}

const fieldId = (field: string) => `field-${field.replace(/[^A-Za-z0-9]+/g, "-")}`;

/** Every issue of a refused form, each a link to its field (the pattern of the GOV.UK error summary). */
export function ErrorSummary({ issues, title }: { issues: readonly FieldIssue[]; title: string }) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    if (issues.length > 0) heading.current?.focus();
  }, [issues]);
  if (issues.length === 0) return null;
  return (
    <div class="error-summary" role="alert" aria-labelledby="error-summary-title">
      <h3 id="error-summary-title" tabIndex={-1} ref={heading}>
        {title}
      </h3>
      <ul>
        {issues.map((issue) => (
          <li key={`${issue.field}:${issue.message}`}>
            <a href={`#${fieldId(issue.field)}`}>
              {issue.field}: {issue.message}
            </a>
          </li>
        ))}
      </ul>
    </div>
  );
}

/** A labelled input with its hint and its error, wired with aria-describedby. */
export function Field(props: {
  field: string;
  label: string;
  hint?: string;
  issues: readonly FieldIssue[];
  children: (attrs: {
    id: string;
    "aria-invalid": boolean;
    "aria-describedby": string | undefined;
  }) => ComponentChildren;
}) {
  const id = fieldId(props.field);
  const errors = props.issues.filter(
    (issue) => issue.field === props.field || issue.field.startsWith(`${props.field}.`),
  );
  const described = [props.hint ? `${id}-hint` : "", errors.length > 0 ? `${id}-error` : ""]
    .filter((part) => part !== "")
    .join(" ");
  return (
    <div class={errors.length > 0 ? "field field-invalid" : "field"}>
      <label for={id}>{props.label}</label>
      {props.hint ? (
        <span class="hint" id={`${id}-hint`}>
          {props.hint}
        </span>
      ) : null}
      {errors.length > 0 ? (
        <span class="field-error" id={`${id}-error`}>
          {errors.map((issue) => issue.message).join("; ")}
        </span>
      ) : null}
      {props.children({
        id,
        "aria-invalid": errors.length > 0,
        "aria-describedby": described === "" ? undefined : described,
      })}
    </div>
  );
}
