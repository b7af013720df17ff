import { CronExpressionParser } from "cron-parser";
import { type CompiledCron, isFeasible } from "./cron-search.js";

export type CronCompileResult =
  | { readonly ok: true; readonly cron: CompiledCron }
  | { readonly ok: false; readonly message: string };

const FIELD_NAMES = ["second", "minute", "hour", "day-of-month", "month", "day-of-week"] as const;
type FieldName = (typeof FIELD_NAMES)[number];

const SHAPE =
  "this scheduler takes 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field";

// Macros are rejected rather than expanded so that the stored expression is always plain fields
// that every reader (people, the API, other tools) interprets the same way.
const MACROS = new Map([
  ["@yearly", "0 0 1 1 *"],
  ["@annually", "0 0 1 1 *"],
  ["@monthly", "0 0 1 * *"],
  ["@weekly", "0 0 * * 0"],
  ["@daily", "0 0 * * *"],
  ["@midnight", "0 0 * * *"],
  ["@hourly", "0 * * * *"],
]);

const RATE_UNITS = new Map<string, (n: string) => string>([
  ["minute", (n) => `PT${n}M`],
  ["minutes", (n) => `PT${n}M`],
  ["hour", (n) => `PT${n}H`],
  ["hours", (n) => `PT${n}H`],
  ["day", (n) => `P${n}D`],
  ["days", (n) => `P${n}D`],
]);

const cache = new Map<string, CronCompileResult>();
const CACHE_LIMIT = 1_000;

/** Validates and compiles a cron expression; results are cached by expression. */
export function compileCron(expression: string): CronCompileResult {
  const cached = cache.get(expression);
  if (cached !== undefined) return cached;
  const result = compileUncached(expression);
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(expression, result);
  return result;
}

/**
 * Why a new cron expression is refused for a list with an empty item (`1-5,`, `1,,15`: a stray
 * comma), or null when it has none. Checked on input only (parseSchedule): a stored expression is
 * read without its empty items (see withoutRepeats), so one stored before this check ran keeps
 * working, read as written without the stray comma.
 */
export function emptyListItemIssue(raw: string): string | null {
  const fields = raw.trim().split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) return null;
  const names = fields.length === 6 ? FIELD_NAMES : FIELD_NAMES.slice(1);
  for (const [i, value] of fields.entries()) {
    if (!value.split(",").includes("")) continue;
    return `${names[i] ?? "second"} field "${value}" is invalid: its list has an empty item (a stray comma): separate values with single commas, e.g. 1,15`;
  }
  return null;
}

function fail(message: string): CronCompileResult {
  return { ok: false, message };
}

function compileUncached(raw: string): CronCompileResult {
  const expression = raw.trim().replace(/\s+/g, " ");
  if (expression === "") {
    return fail(`must not be empty: ${SHAPE}, e.g. "0 9 * * MON-FRI"`);
  }

  const wrapped = /^cron\((.*)\)$/is.exec(expression);
  if (wrapped !== null) {
    return fail(quartzMessage((wrapped[1] ?? "").trim(), true));
  }
  const rate = /^rate\(\s*(\d+)\s+([a-z]+)\s*\)$/i.exec(expression);
  if (rate !== null || /^rate\(/i.test(expression)) {
    const toEvery = rate?.[2] === undefined ? undefined : RATE_UNITS.get(rate[2].toLowerCase());
    const suggestion =
      toEvery !== undefined && rate?.[1] !== undefined
        ? `{"every": "${toEvery(rate[1])}"}`
        : `{"every": "<ISO-8601 duration>"}`;
    return fail(
      `"${expression}" is an EventBridge rate expression, not cron: use an interval schedule such as ${suggestion} instead`,
    );
  }

  if (expression.startsWith("@")) {
    const macro = expression.split(" ")[0]?.toLowerCase() ?? "";
    const equivalent = MACROS.get(macro);
    if (equivalent !== undefined) {
      return fail(
        `macros such as "${macro}" are not accepted; write the fields out instead: "${equivalent}"`,
      );
    }
    if (macro === "@every") {
      return fail(
        `"@every" is not cron: use an interval schedule such as {"every": "PT5M"} instead`,
      );
    }
    return fail(`"${macro}" is not supported: ${SHAPE}`);
  }

  const fields = expression.split(" ");
  if (fields.length === 7 || expression.includes("?")) {
    return fail(quartzMessage(expression, false));
  }
  if (fields.length !== 5 && fields.length !== 6) {
    return fail(
      `has ${fields.length} field${fields.length === 1 ? "" : "s"}, expected 5 (minute hour day-of-month month day-of-week) or 6 (second minute hour day-of-month month day-of-week)`,
    );
  }
  const six = fields.length === 6 ? fields : ["0", ...fields];

  for (let i = 0; i < 6; i++) {
    const value = six[i] ?? "";
    const name = FIELD_NAMES[i] ?? "second";
    if (/(?:^|[,\-/])H(?:$|[,/(])/.test(value)) {
      return fail(
        `${name} field "${value}" uses H (a hashed, random value), which is not supported because occurrences must be reproducible: pick a fixed value`,
      );
    }
    if (name === "day-of-month" && /(?:^|,)L-/i.test(value)) {
      return fail(
        `day-of-month field "${value}" counts days back from the last (L-n), which is not supported: L alone is the last day`,
      );
    }
    if (name === "day-of-month" && /W/i.test(value)) {
      return fail(
        `day-of-month field "${value}" uses W (nearest weekday), which is not supported: list the days, or combine day-of-week with a day range (OR semantics apply when both are restricted)`,
      );
    }
  }

  const parseable = six.map((field, i) => withoutRepeats(field, i));
  let parsed: ReturnType<typeof CronExpressionParser.parse>;
  try {
    parsed = CronExpressionParser.parse(parseable.join(" "));
  } catch (error) {
    // cron-parser does not say which field it choked on; parsing each field alone does.
    for (let i = 0; i < 6; i++) {
      try {
        parseFieldAlone(i, parseable[i] ?? "*");
      } catch (fieldError) {
        const name = FIELD_NAMES[i] ?? "second";
        return fail(
          `${name} field "${six[i]}" is invalid: ${explain(errorText(fieldError), name, six[i] ?? "")}`,
        );
      }
    }
    const text = errorText(error);
    if (/Invalid explicit day of month/.test(text)) return fail(neverFires(six));
    return fail(`is invalid: ${text}`);
  }

  const cron = build(expression, parsed.fields);
  if (!isFeasible(cron)) return fail(neverFires(six));
  return { ok: true, cron };
}

/** One field parsed alone (the field at `index` is `value`, every other one unrestricted). */
function parseFieldAlone(index: number, value: string): ParsedFields {
  const probe = ["0", "*", "*", "*", "*", "*"];
  probe[index] = value;
  return CronExpressionParser.parse(probe.join(" ")).fields;
}

const FIELD_KEYS = ["second", "minute", "hour", "dayOfMonth", "month", "dayOfWeek"] as const;
const DAY_FIELDS: ReadonlySet<string> = new Set(["dayOfMonth", "dayOfWeek"]);

/**
 * A list field as cron-parser takes it: cron reads a list as the union of its items (crontab(5):
 * "0-4,8-12"), so `0,7` (Sunday twice), `9-17,12` or `0-30,15` name a value more than once, which
 * cron-parser refuses ("duplicate values found"). Such a field is written as the values its items
 * expand to, each once; an item of a day field with L or # is kept as written (a month's name
 * such as JUL is a value like any other). A field whose items overlap in nothing, or that the
 * parser refuses for another reason, comes back as it is, so its own error is the one reported.
 * Only what is parsed changes: the stored expression is the one given.
 */
function withoutRepeats(field: string, index: number): string {
  // An empty item parsed alone would be an empty field, which shifts the others ("1-5," read as
  // every weekday); new expressions with one are refused (emptyListItemIssue), stored ones are
  // read without it, and a field of nothing but commas as `*`.
  const items = field.split(",").filter((item) => item !== "");
  if (items.length === 0) return "*";
  if (items.length < 2) return items.join(",");
  const key = FIELD_KEYS[index] ?? "second";
  const kept: string[] = [];
  const values = new Set<number>();
  let repeated = false;
  for (const item of items) {
    // L and # mean something only in the day fields; elsewhere an L is in a name (JUL).
    if (DAY_FIELDS.has(key) && /[L#]/i.test(item)) {
      if (kept.includes(item)) repeated = true;
      else kept.push(item);
      continue;
    }
    let parsed: ParsedFields;
    try {
      parsed = parseFieldAlone(index, item);
    } catch {
      return field;
    }
    for (const value of numbers(parsed[key])) {
      const day = key === "dayOfWeek" ? value % 7 : value;
      if (values.has(day)) repeated = true;
      values.add(day);
    }
  }
  if (!repeated) return items.join(",");
  return [...[...values].sort((a, b) => a - b).map(String), ...kept].join(",");
}

function neverFires(six: readonly string[]): string {
  return `never fires: no calendar day matches day-of-month "${six[3]}", month "${six[4]}" and day-of-week "${six[5]}"`;
}

function quartzMessage(expression: string, wrapped: boolean): string {
  const fields = expression.split(/\s+/);
  const reasons = [
    ...(wrapped ? ['"cron(...)" wrapper'] : []),
    ...(fields.length === 7 ? ["7 fields"] : []),
    ...(expression.includes("?") ? ["'?'"] : []),
  ];
  let text = `"${wrapped ? `cron(${expression})` : expression}" looks like a Quartz/EventBridge expression (${reasons.join(" / ")}): ${SHAPE}; ${wrapped ? "write the fields without the cron(...) wrapper, " : ""}drop the year field and replace '?' with '*'`;
  // Quartz and EventBridge count weekdays 1-7 from Sunday where cron counts 0-6, so a numeric
  // day-of-week would be silently shifted by one if copied over.
  if (fields.some((f, i) => i >= 4 && /\d/.test(f) && !/^\d{4}(?:-\d{4})?$/.test(f))) {
    text +=
      "; note that Quartz/EventBridge number weekdays 1-7 from Sunday while cron uses 0-6 (names such as MON mean the same in both)";
  }
  return text;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Each field's values, as a wrapping range is split (Sunday is 0; 7 only repeats it). */
const FIELD_BOUNDS: Readonly<Record<FieldName, readonly [number, number]>> = {
  second: [0, 59],
  minute: [0, 59],
  hour: [0, 23],
  "day-of-month": [1, 31],
  month: [1, 12],
  "day-of-week": [0, 6],
};

const NAMES = [..."JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(" ")];
const DAY_NAMES = [..."SUN MON TUE WED THU FRI SAT".split(" ")];

/** The step of the item of `value` that is the range from-to (names as numbers), if it has one. */
function stepOf(value: string, field: FieldName, from: number, to: number): number | undefined {
  const asNumber = (end: string) => {
    const names = field === "month" ? NAMES : field === "day-of-week" ? DAY_NAMES : [];
    const at = names.indexOf(end.toUpperCase());
    return at < 0 ? Number(end) : field === "month" ? at + 1 : at;
  };
  for (const item of value.split(",")) {
    const stepped = /^(\w+)-(\w+)\/(\d+)$/.exec(item);
    if (stepped === null) continue;
    const [, start = "", end = "", step = ""] = stepped;
    if (asNumber(start) === from && asNumber(end) === to) return Number(step);
  }
  return undefined;
}

/** A backwards range's values as it would wrap, its step counted on from its start across the end. */
function wrappedValues(field: FieldName, from: number, to: number, step: number): string {
  const [low, high] = FIELD_BOUNDS[field];
  const span = high - low + 1;
  const length = (((to - from) % span) + span) % span;
  const values: number[] = [];
  for (let k = 0; k <= length; k += step) values.push(low + ((from - low + k) % span));
  return values.join(",");
}

function explain(text: string, field: FieldName, fieldValue: string): string {
  const value = /got value (\S+) expected range (\d+)-(\d+)/.exec(text);
  if (value !== null) return `${value[1]} is out of range ${value[2]}-${value[3]}`;
  const range = /got range (\S+)-(\S+) expected range (\d+)-(\d+)/.exec(text);
  if (range !== null) {
    if (range[1] === "NaN" || range[2] === "NaN") return "a range needs two numbers, e.g. 1-5";
    return `range ${range[1]}-${range[2]} goes outside ${range[3]}-${range[4]}`;
  }
  const backwards = /Invalid range: (\d+)-(\d+), min/.exec(text);
  if (backwards !== null) {
    // Most such ranges are meant to wrap (22-2 overnight, NOV-FEB in winter), where swapping the
    // two ends would name the very times not meant.
    const [low, high] = FIELD_BOUNDS[field];
    const from = Number(backwards[1]);
    const to = Number(backwards[2]);
    // A step counts on from the range's start (22-2/2 is 22, 0 and 2), so its values are listed.
    const step = stepOf(fieldValue, field, from, to);
    // Sunday as 7 (7-1) is Sunday as 0: the range needs no wrapping.
    const wrapped =
      field === "day-of-week" && from === 7
        ? `${to === 0 ? 0 : `0-${to}`}${step === undefined || to === 0 ? "" : `/${step}`}`
        : step !== undefined
          ? wrappedValues(field, from, to, step)
          : `${from === high ? from : `${from}-${high}`},${to === low ? low : `${low}-${to}`}`;
    return `range ${from}-${to} runs backwards, and cron ranges do not wrap around: to wrap, write ${wrapped}; otherwise write the smaller value first`;
  }
  const alias = /cannot resolve alias "(\w+)"/.exec(text);
  if (alias !== null) {
    const names = field === "month" ? "JAN-DEC" : "SUN-SAT";
    return `unknown name "${alias[1]}" (use three-letter names ${names})`;
  }
  if (/unexpected standalone L/.test(text)) {
    return 'L alone is not valid here: use "5L" for the last Friday of the month, or L in day-of-month for the last day';
  }
  if (/cannot repeat at every/.test(text)) return "a step must be a positive number";
  if (/occurrence number \(#\)/.test(text)) return "# takes an occurrence from 1 to 5, e.g. MON#2";
  const incompatible = /`#` and `(.)` special characters are incompatible/.exec(text);
  if (incompatible !== null) {
    return `# cannot be combined with "${incompatible[1]}": it takes a single weekday, e.g. MON#2`;
  }
  if (/Invalid characters|Invalid wildcard|Invalid list value|Invalid repeat/.test(text)) {
    return "it is not a value, list, range or step this field accepts";
  }
  return text;
}

/** The slice of cron-parser's field objects that is read; its .d.ts narrows values too far. */
interface ParsedField {
  readonly values: readonly (number | string)[];
  readonly isWildcard: boolean;
  readonly hasLastChar: boolean;
}
interface ParsedFields {
  readonly second: ParsedField;
  readonly minute: ParsedField;
  readonly hour: ParsedField;
  readonly dayOfMonth: ParsedField;
  readonly month: ParsedField;
  readonly dayOfWeek: ParsedField & { readonly nthDay: number };
}

function numbers(field: ParsedField): number[] {
  const out = new Set<number>();
  for (const v of field.values) if (typeof v === "number") out.add(v);
  return [...out].sort((a, b) => a - b);
}

function nextTable(values: readonly number[], size: number): Int8Array {
  const table = new Int8Array(size + 1).fill(-1);
  let next = -1;
  for (let v = size - 1; v >= 0; v--) {
    if (values.includes(v)) next = v;
    table[v] = next;
  }
  return table;
}

function build(expression: string, fields: ParsedFields): CompiledCron {
  const seconds = numbers(fields.second);
  const minutes = numbers(fields.minute);
  const hours = numbers(fields.hour);
  const months = numbers(fields.month);
  const dom: boolean[] = new Array<boolean>(32).fill(false);
  for (const d of numbers(fields.dayOfMonth)) dom[d] = true;
  const dow: boolean[] = new Array<boolean>(7).fill(false);
  for (const d of numbers(fields.dayOfWeek)) dow[d % 7] = true;
  // Mirrors cron-parser's matcher: with any "L" in the field, every listed weekday (by its first
  // digit) also matches on its last occurrence in the month.
  const dowLast: boolean[] = new Array<boolean>(7).fill(false);
  const dowHasLast = fields.dayOfWeek.hasLastChar;
  if (dowHasLast) {
    for (const v of fields.dayOfWeek.values) {
      const digit = Number.parseInt(String(v).charAt(0), 10);
      if (!Number.isNaN(digit)) dowLast[digit % 7] = true;
    }
  }
  return {
    expression,
    seconds,
    minutes,
    hours,
    months,
    nextSecond: nextTable(seconds, 60),
    nextMinute: nextTable(minutes, 60),
    nextHour: nextTable(hours, 24),
    nextMonth: nextTable(months, 13),
    dom,
    domLast: fields.dayOfMonth.hasLastChar,
    domWildcard: fields.dayOfMonth.isWildcard,
    dow,
    dowLast,
    dowHasLast,
    nth: fields.dayOfWeek.nthDay,
    dowWildcard: fields.dayOfWeek.isWildcard,
  };
}
