import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorSchema } from "../../shared/api/schemas/errors.js";
import { JobSchema } from "../../shared/api/schemas/jobs.js";
import { RunSchema } from "../../shared/api/schemas/runs.js";
import { runCaptured } from "../support/cli-run.js";
import { type ApiHarness, deadRunVia, KEY_A, type Reply, startApi } from "./support.js";

/**
 * The docs' examples, run as a user would run them: every curl request in docs/api.md's and
 * docs/deploy.md's shell blocks is sent, in order, to the API (local server, DynamoDB Local,
 * fauxqs), and every ```json request block of docs/api.md is created; each must be accepted as
 * the doc shows (2xx), or answered as its `# → …` comment says (the status, the error's code,
 * field and the start of its message, or the answer's fields and values). The ```json response
 * blocks are the error shape. The ```ts blocks of docs/api.md and docs/cli.md are taken from
 * examples/*.ts, which `npm run typecheck` compiles: a snippet that would not compile, or an
 * example changed without its doc, fails here.
 */
const REPO = resolve(import.meta.dirname, "../..");
const read = (path: string) => readFileSync(join(REPO, path), "utf8");

interface Fence {
  readonly doc: string;
  /** The fence's line in the doc, 1-based. */
  readonly line: number;
  /** The info string after the opening ```, e.g. `json request POST /jobs`. */
  readonly info: string;
  readonly body: string;
}

function fences(doc: string): Fence[] {
  const found: Fence[] = [];
  let open: { line: number; info: string; lines: string[] } | null = null;
  read(doc)
    .split("\n")
    .forEach((text, index) => {
      if (open === null) {
        const start = /^```(.*)$/.exec(text);
        if (start) open = { line: index + 1, info: (start[1] ?? "").trim(), lines: [] };
      } else if (text === "```") {
        found.push({ doc, line: open.line, info: open.info, body: open.lines.join("\n") });
        open = null;
      } else open.lines.push(text);
    });
  return found;
}

/** A curl (or awscurl) command of a shell block, its arguments unquoted as the shell would. */
interface Curl {
  readonly where: string;
  readonly args: readonly string[];
  /** The shell variable its answer is assigned to (`JOB=$(curl …)`), if any. */
  readonly assigns: string | null;
  /** The `# → …` comment just after it, if any: the answer the doc shows. */
  readonly answer: string | null;
}

/**
 * The words of the command starting at `start`, as sh splits them (single and double quotes,
 * a backslash-newline continues the line), up to an unquoted newline, `|`, `)` or `;`.
 */
function words(text: string, start: number): { words: string[]; end: number } {
  const found: string[] = [];
  let word: string | null = null;
  let i = start;
  const flush = () => {
    if (word !== null) found.push(word);
    word = null;
  };
  while (i < text.length) {
    const c = text[i] ?? "";
    if (c === "\\" && text[i + 1] === "\n") i += 2;
    else if (c === "\n" || c === "|" || c === ")" || c === ";") break;
    else if (c === " " || c === "\t") {
      flush();
      i += 1;
    } else if (c === "'") {
      const close = text.indexOf("'", i + 1);
      if (close < 0) throw new Error(`an unterminated ' in: ${text.slice(start, start + 80)}`);
      word = (word ?? "") + text.slice(i + 1, close);
      i = close + 1;
    } else if (c === '"') {
      let j = i + 1;
      let quoted = "";
      while (text[j] !== '"') {
        if (j >= text.length)
          throw new Error(`an unterminated " in: ${text.slice(start, start + 80)}`);
        if (text[j] === "\\" && text[j + 1] !== undefined && '"\\$'.includes(text[j + 1] ?? "")) {
          quoted += text[j + 1];
          j += 2;
        } else {
          quoted += text[j];
          j += 1;
        }
      }
      word = (word ?? "") + quoted;
      i = j + 1;
    } else {
      word = (word ?? "") + c;
      i += 1;
    }
  }
  flush();
  return { words: found, end: i };
}

function curls(fence: Fence): Curl[] {
  const found: Curl[] = [];
  const text = fence.body;
  for (const match of text.matchAll(/(?:^|[\s(])(aws)?curl\s/g)) {
    const start = (match.index ?? 0) + match[0].indexOf("curl") - (match[1] ? 3 : 0);
    const { words: args, end } = words(text, start);
    const after = text.slice(text.indexOf("\n", end) + 1).split("\n");
    let answer: string | null = null;
    if (after[0]?.startsWith("# → ")) {
      const lines = [after[0].slice("# → ".length)];
      for (const line of after.slice(1)) {
        if (!/^# {2,}/.test(line)) break;
        lines.push(line.slice(1));
      }
      answer = lines.join("\n");
    }
    const line = fence.line + 1 + text.slice(0, start).split("\n").length - 1;
    const assigns = /(\w+)=\$\($/.exec(text.slice(text.lastIndexOf("\n", start) + 1, start))?.[1];
    found.push({ where: `${fence.doc}:${line}`, args, assigns: assigns ?? null, answer });
  }
  return found;
}

/** The method, path, headers and body a curl command sends, its `$API` the local server. */
function requestOf(curl: Curl) {
  let method: string | null = null;
  let body: string | undefined;
  let url: string | undefined;
  const headers: Record<string, string> = {};
  const args = [...curl.args.slice(1)];
  while (args.length > 0) {
    const arg = args.shift() ?? "";
    if (arg === "-X") method = args.shift() ?? null;
    else if (arg === "-d") body = args.shift();
    else if (arg === "-H") {
      const header = args.shift() ?? "";
      // $AUTH: the tenant's credentials, which the harness sends.
      if (header === "$AUTH") continue;
      const colon = header.indexOf(":");
      expect(colon, `${curl.where}: header ${header}`).toBeGreaterThan(0);
      const name = header.slice(0, colon).trim();
      headers[/^content-type$/i.test(name) ? "Content-Type" : name] = header
        .slice(colon + 1)
        .trim();
    } else if (arg === "--service" || arg === "--region") args.shift();
    else if (/^\$(API|\{API\})/.test(arg)) url = arg;
    else expect(arg, `${curl.where}: an option this test does not know`).toMatch(/^-s*S?$/);
  }
  expect(url, `${curl.where}: no $API URL`).toBeDefined();
  // $API is http://host:port (api.md); ${API} is the stack's ApiUrl output, which ends in a slash.
  const path = (url ?? "").replace(/^\$\{API\}/, "/").replace(/^\$API/, "");
  return { method: method ?? (body === undefined ? "GET" : "POST"), path, headers, body };
}

/** The `$VAR`s and `<placeholders>` of the examples' paths, filled in as the examples go. */
interface Names {
  job?: string;
  run?: string;
  deadRun?: string;
}

async function resolvePath(api: ApiHarness, path: string, names: Names): Promise<string> {
  let resolved = path;
  if (resolved.includes("$JOB")) {
    expect(names.job, `${path}: $JOB before the example that sets it`).toBeDefined();
    resolved = resolved.replaceAll("$JOB", names.job ?? "");
  }
  if (resolved.startsWith("/dead-letters/<runId>")) {
    names.deadRun ??= await deadRunOf(api);
    resolved = resolved.replace("<runId>", names.deadRun);
  } else if (resolved.includes("/runs/<runId>")) {
    names.run ??= await triggered(api, names.job ?? "");
    resolved = resolved.replace("<runId>", names.run);
  }
  expect(resolved, "a placeholder this test does not fill in").not.toMatch(/[<>$]/);
  return resolved;
}

async function triggered(api: ApiHarness, jobId: string): Promise<string> {
  const reply = await api.call("POST", `/jobs/${jobId}/trigger`);
  expect(reply.status, reply.text).toBe(202);
  return RunSchema.parse(reply.body).runId;
}

async function deadRunOf(api: ApiHarness): Promise<string> {
  const { jobId } = await deadRunVia(api);
  const runs = await api.call("GET", `/jobs/${jobId}/runs`);
  const dead = (runs.body as { items: { runId: string; status: string }[] }).items.find(
    (run) => run.status === "dead",
  );
  expect(dead, runs.text).toBeDefined();
  return dead?.runId ?? "";
}

/** The names of the fields of the outermost object of a JSON-like text (`…` and `...` allowed). */
function topLevelKeys(text: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (const token of text.matchAll(/"((?:[^"\\]|\\.)*)"(\s*:)?|[{[]|[}\]]/g)) {
    if (token[0] === "{" || token[0] === "[") depth += 1;
    else if (token[0] === "}" || token[0] === "]") depth -= 1;
    else if (token[2] !== undefined && depth === 1) keys.push(token[1] ?? "");
  }
  return keys;
}

/** Checks an answer against the `# → …` comment that shows it. */
function expectAnswer(where: string, reply: Reply, shown: string): void {
  const status = /^(\d{3}) /.exec(shown);
  if (status) {
    expect(reply.status, `${where}: ${reply.text}`).toBe(Number(status[1]));
    const { error } = ErrorSchema.parse(reply.body);
    const code = /"code": "([^"]+)"/.exec(shown)?.[1];
    const field = /"field": "([^"]+)"/.exec(shown)?.[1];
    const message = /"message": "((?:[^"\\]|\\.)*)"/.exec(shown)?.[1];
    expect(code, `${where}: the error shown names no code`).toBeDefined();
    expect(error.code, where).toBe(code);
    if (field !== undefined) expect(error.field, where).toBe(field);
    if (message !== undefined) {
      const start = (JSON.parse(`"${message}"`) as string).replace(/…$/, "").replace(/, $/, "");
      expect(error.message.startsWith(start), `${where}: ${error.message}`).toBe(true);
    }
    return;
  }
  expect(reply.status, `${where}: ${reply.text}`).toBeLessThan(300);
  const body = reply.body as Record<string, unknown>;
  // Every field the comment shows at the top level is in the answer…
  const keys = topLevelKeys(shown);
  expect(keys.length, `${where}: the answer shown names no field`).toBeGreaterThan(0);
  for (const key of keys) expect(body, where).toHaveProperty(key);
  // …and the occurrences it shows are the answer's first ones, in order.
  const occurrences = [...shown.matchAll(/\{"utc": "([^"]+)", "local": "([^"]+)"\}/g)].map(
    ([, utc, local]) => ({ utc, local }),
  );
  if (occurrences.length > 0)
    expect((body.occurrences as unknown[]).slice(0, occurrences.length), where).toEqual(
      occurrences,
    );
}

const SHELL_DOCS = ["docs/api.md", "docs/deploy.md"];

let api: ApiHarness;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe("docs/api.md and docs/deploy.md: the curl examples", () => {
  /** Read in each test, so that a block this test cannot read fails it rather than the file. */
  const shellExamples = () =>
    SHELL_DOCS.flatMap(fences)
      .filter((fence) => fence.info === "sh" || fence.info === "bash")
      .flatMap(curls);

  it("finds the examples", () => {
    const examples = shellExamples();
    expect(examples.length).toBeGreaterThanOrEqual(14);
    expect(examples.filter((curl) => curl.answer !== null).length).toBeGreaterThanOrEqual(2);
  });

  it("answers each request as the doc shows", async () => {
    const names: Names = {};
    for (const curl of shellExamples()) {
      const request = requestOf(curl);
      const path = await resolvePath(api, request.path, names);
      const reply = await api.call(request.method, path, {
        ...(request.body === undefined ? {} : { raw: request.body }),
        // The body as the doc sends it: its own Content-Type header, or curl's -d default.
        headers: {
          ...(request.body === undefined
            ? {}
            : { "Content-Type": "application/x-www-form-urlencoded" }),
          ...request.headers,
        },
      });
      if (curl.answer !== null) expectAnswer(curl.where, reply, curl.answer);
      else
        expect(
          reply.status,
          `${curl.where}: ${request.method} ${path}: ${reply.text}`,
        ).toBeLessThan(300);
      // `JOB=$(curl … | jq -r .id)`: the job the examples after it use.
      if (curl.assigns === "JOB") names.job = JobSchema.parse(reply.body).id;
    }
  }, 60_000);
});

describe("docs/api.md: the JSON blocks", () => {
  const blocks = fences("docs/api.md").filter((fence) => fence.info.startsWith("json"));

  it("marks each as a request or a response", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    for (const block of blocks)
      expect(block.info, `docs/api.md:${block.line}`).toMatch(
        /^json (request (POST|PATCH|PUT) \/\S+|response error)$/,
      );
  });

  it("accepts each request body", async () => {
    const requests = blocks.filter((block) => block.info.startsWith("json request"));
    expect(requests.length).toBeGreaterThanOrEqual(1);
    for (const block of requests) {
      const [, , method = "", path = ""] = block.info.split(" ");
      const reply = await api.call(method, path, {
        raw: block.body,
        headers: { "Content-Type": "application/json" },
      });
      expect(reply.status, `docs/api.md:${block.line}: ${reply.text}`).toBeLessThan(300);
    }
  });

  it("lists in its errors table only codes the API answers with", () => {
    const table =
      read("docs/api.md").match(/^\| (\d{3}) +\| (`[a-z_]+`(?:, `[a-z_]+`)*) +\|/gm) ?? [];
    const codes = table.flatMap((row) => [...row.matchAll(/`([a-z_]+)`/g)].map(([, code]) => code));
    expect(codes.length).toBeGreaterThanOrEqual(15);
    const known: readonly string[] = ErrorSchema.shape.error.shape.code.options;
    for (const code of codes) expect(known, `docs/api.md's errors table: ${code}`).toContain(code);
  });

  it("lists in its errors table every code the API answers with", () => {
    const table =
      read("docs/api.md").match(/^\| (\d{3}) +\| (`[a-z_]+`(?:, `[a-z_]+`)*) +\|/gm) ?? [];
    const listed = new Set(
      table.flatMap((row) => [...row.matchAll(/`([a-z_]+)`/g)].map(([, code]) => code)),
    );
    const known: readonly string[] = ErrorSchema.shape.error.shape.code.options;
    expect(known.length).toBeGreaterThanOrEqual(15);
    expect(known.filter((code) => !listed.has(code))).toEqual([]);
  });

  it("shows the error shape the API answers", () => {
    for (const block of blocks.filter((b) => b.info === "json response error"))
      expect(
        ErrorSchema.safeParse(JSON.parse(block.body)).error,
        `docs/api.md:${block.line}`,
      ).toBeUndefined();
  });
});

describe("docs/cli.md: the CLI session", () => {
  /** Each `$ npx scheduler …` line of the ```console block, with the output the doc shows after it. */
  const sessionOf = () =>
    fences("docs/cli.md")
      .filter((fence) => fence.info === "console")
      .flatMap((fence) => {
        const commands: { where: string; args: string[]; output: string[] }[] = [];
        fence.body.split("\n").forEach((line, index) => {
          if (line.startsWith("$ ")) {
            const { words: args } = words(line, 2);
            commands.push({ where: `docs/cli.md:${fence.line + 1 + index}`, args, output: [] });
          } else commands.at(-1)?.output.push(line);
        });
        return commands;
      });

  /** A line the doc shows as a pattern: its ids and digits stand for any. */
  const shownAs = (line: string) => {
    const ULID = "[0-9A-HJKMNP-TV-Z]{26}";
    const pattern = line
      .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
      .split(new RegExp(`\\b${ULID}\\b`))
      .map((part) => part.replace(/\d/g, "\\d"))
      .join(ULID);
    return new RegExp(`^${pattern}$`);
  };

  it("runs each command with the current flags, printing what the doc shows", async () => {
    const session = sessionOf();
    expect(session.length).toBeGreaterThanOrEqual(4);
    const ids = new Map<string, string>();
    for (const { where, args, output } of session) {
      expect(args.slice(0, 2), where).toEqual(["npx", "scheduler"]);
      // `; echo $?`: the last line the doc shows is the exit code.
      const code =
        output.length > 0 && /^\d+$/.test(output.at(-1) ?? "") ? Number(output.pop()) : 0;
      const sent = args.slice(2).map((arg) => ids.get(arg) ?? arg);
      const outcome = await runCaptured(["--api", api.server.url, "--key", KEY_A, ...sent]);
      expect(outcome.code, `${where}: ${outcome.out}${outcome.err}`).toBe(code);
      const printed = `${outcome.out}${outcome.err}`.split("\n");
      let at = 0;
      for (const line of output.filter((l) => l !== "…")) {
        const found = printed.findIndex((p, i) => i >= at && shownAs(line).test(p));
        expect(
          found,
          `${where}: the doc shows "${line}"; printed:\n${printed.join("\n")}`,
        ).toBeGreaterThanOrEqual(0);
        at = found + 1;
      }
      // The id the doc shows for a job it creates is the one the later lines name.
      const shownId = /^id\s+(\S+)$/m.exec(output.join("\n"))?.[1];
      const printedId = /^id\s+(\S+)$/m.exec(outcome.out)?.[1];
      if (shownId !== undefined && printedId !== undefined) ids.set(shownId, printedId);
    }
  });
});

describe("docs/api.md and docs/cli.md: the TypeScript blocks", () => {
  const IMPORT = /import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+"([^"]+)";/g;
  /** `module: name` for each name the code imports from a module. */
  const imports = (code: string) =>
    [...code.matchAll(IMPORT)].flatMap(([, names = "", from]) =>
      names
        .split(",")
        .map((name) => name.replace(/^\s*type\s+/, "").trim())
        .filter((name) => name !== "")
        .map((name) => `${from}: ${name}`),
    );
  /** The code's lines but its imports, trimmed, without blank ones. */
  const statements = (code: string) =>
    code
      .replace(IMPORT, "")
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line !== "");

  const examples = readdirSync(join(REPO, "examples"))
    .filter((name) => name.endsWith(".ts"))
    .map((name) => {
      const code = read(join("examples", name));
      return { name, imports: imports(code), lines: statements(code) };
    });

  /** Whether the example imports what the block imports, and has its every line in its order. */
  const holds = (example: (typeof examples)[number], block: Fence) => {
    if (!imports(block.body).every((name) => example.imports.includes(name))) return false;
    let at = 0;
    for (const line of statements(block.body)) {
      const found = example.lines.indexOf(line, at);
      if (found < 0) return false;
      at = found + 1;
    }
    return true;
  };

  it("takes each from an example that npm run typecheck compiles", () => {
    const tsconfig = JSON.parse(read("tsconfig.json")) as { include: string[] };
    expect(tsconfig.include).toContain("examples");
    const blocks = ["docs/api.md", "docs/cli.md"]
      .flatMap(fences)
      .filter((fence) => fence.info === "ts");
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    for (const block of blocks)
      expect(
        examples.filter((example) => holds(example, block)).map((e) => e.name),
        `${block.doc}:${block.line}: no examples/*.ts holds this block`,
      ).not.toEqual([]);
  });
});
