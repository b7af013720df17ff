import { basename } from "node:path";
import { parseArgs } from "node:util";

type BenchOption =
  /** `list`: comma-separated values, as `--concurrency 16,64`. */
  | { readonly type: "string"; readonly default?: string; readonly list?: true }
  | { readonly type: "boolean"; readonly default?: boolean };

type BenchValues<Options extends Record<string, BenchOption>> = {
  [Name in keyof Options]: Options[Name] extends { type: "boolean" }
    ? boolean
    : Options[Name] extends { default: string }
      ? string
      : string | undefined;
};

/** The command line and the process, as parameters so that tests can give their own. */
export interface BenchArgsIo {
  readonly args: readonly string[];
  readonly print: (text: string) => void;
  readonly fail: (text: string) => void;
  readonly exit: (code: number) => never;
}

/** `--name (default)` for each option, generated so that the usage cannot drift from them. */
function usageOf(script: string, options: Record<string, BenchOption>): string {
  const lines = Object.entries(options).map(([name, option]) =>
    option.type === "boolean"
      ? `  --${name}`
      : `  --${name} <value>${option.default === undefined ? "" : ` (${option.default})`}`,
  );
  return [`usage: tsx bench/${script} [options]`, ...lines, "  -h, --help"].join("\n");
}

/**
 * A bench's options from the command line, for a person who typed them: `--help` prints each
 * with its default; a misspelt option, one without its value, a stray argument, or a number
 * that is none (`--jobs 1,000` from a figure's thousands separator) exits 2 naming it, before
 * the bench starts anything. A string option whose default is a number takes only a number (a
 * `list` option numbers separated by commas).
 */
export function benchArgs<Options extends Record<string, BenchOption>>(
  scriptUrl: string,
  options: Options,
  io: BenchArgsIo = {
    args: process.argv.slice(2),
    print: (text) => console.log(text),
    fail: (text) => console.error(text),
    exit: (code) => process.exit(code),
  },
): BenchValues<Options> {
  const script = basename(new URL(scriptUrl).pathname);
  const usage = usageOf(script, options);
  let values: Record<string, unknown>;
  try {
    const parserOptions = Object.fromEntries(
      Object.entries(options).map(([name, option]) =>
        option.type === "string"
          ? [name, { type: "string" as const, default: option.default }]
          : [name, { type: "boolean" as const, default: option.default }],
      ),
    );
    values = parseArgs({
      args: [...io.args],
      options: { ...parserOptions, help: { type: "boolean", short: "h" } },
    }).values;
  } catch (error) {
    io.fail(`${error instanceof Error ? error.message : String(error)}\n${usage}`);
    return io.exit(2);
  }
  if (values.help === true) {
    io.print(usage);
    return io.exit(0);
  }
  const isNumber = (text: string) => text.trim() !== "" && Number.isFinite(Number(text));
  for (const [name, option] of Object.entries(options)) {
    const value = values[name];
    if (option.type !== "string" || option.default === undefined || typeof value !== "string")
      continue;
    const items = (text: string) => (option.list ? text.split(",") : [text]);
    if (items(option.default).every(isNumber) && !items(value).every(isNumber)) {
      const what = option.list ? "comma-separated numbers" : "a number";
      io.fail(`--${name} takes ${what} (default ${option.default}), got "${value}"`);
      return io.exit(2);
    }
  }
  return values as BenchValues<Options>;
}
