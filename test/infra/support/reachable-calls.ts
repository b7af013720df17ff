import { build } from "esbuild";
import {
  JOBS_BY_TENANT_INDEX,
  RUNS_DEAD_LETTER_INDEX,
  RUNS_INFLIGHT_INDEX,
} from "../../../shared/storage/tables.js";

/**
 * The AWS calls a handler's code can make at all, read from its bundle rather than from a run of
 * it: esbuild bundles the handler as `cdk synth` does, tree-shaken (a function nothing reaches is
 * dropped), with the SDK left as imports, and every `new <Command>(…)` left in the output is a
 * call some path can send, however rare. Where the command's input names its table (`TableName:
 * engine.tables.jobs`) and index, the call says which: an input written in place, or the object
 * literal a bare identifier there holds, declared in the same function (`new
 * UpdateCommand(runUpdate)`), or one such an input spreads (`{ ...update, ReturnValues }`);
 * otherwise only the action is known. A transaction's items are read the same way, each
 * `Put:`/`Update:`/`Delete:`/`ConditionCheck:` of a bundle that sends transactions
 * (`{ Update: runUpdate }` as much as `Put: { TableName: engine.tables.runs, … }`).
 *
 * What it would not see the calls of, it refuses, naming the package and where the bundle imports
 * it: an SDK client package it knows no service for, the SDK imported other than by name, and an
 * import that is not a command, a client or an error class (an aggregated client such as
 * `DynamoDBDocument`, whose `doc.get(…)` builds its command inside the SDK; a paginator; a waiter).
 */
export interface ReachableCall {
  /** `dynamodb:GetItem`, `sqs:SendMessage`, `lambda:InvokeFunction`. */
  readonly action: string;
  /** `jobs`, `runs`, `webhookSecrets` (the engine's table names), or null when not in the input. */
  readonly table: string | null;
  readonly index: string | null;
  /** Where the bundle sends it: `shared/storage/run-reads.ts getJob`. */
  readonly site: string;
}

const INDEX_CONSTANTS: Readonly<Record<string, string>> = {
  JOBS_BY_TENANT_INDEX,
  RUNS_DEAD_LETTER_INDEX,
  RUNS_INFLIGHT_INDEX,
};

/** The SDK's packages that make no AWS call: marshalling. */
const NO_CALL_PACKAGES: ReadonlySet<string> = new Set(["@aws-sdk/util-dynamodb"]);

/** The SDK's client packages this reading knows, and their calls' IAM service. */
const SERVICE_OF_PACKAGE: Readonly<Record<string, string>> = {
  "@aws-sdk/lib-dynamodb": "dynamodb",
  "@aws-sdk/client-dynamodb": "dynamodb",
  "@aws-sdk/client-sqs": "sqs",
  "@aws-sdk/client-lambda": "lambda",
};

/** lib-dynamodb's document commands → the operation IAM authorizes. */
const DOCUMENT_OPERATIONS: Readonly<Record<string, string>> = {
  Get: "GetItem",
  Put: "PutItem",
  Update: "UpdateItem",
  Delete: "DeleteItem",
  BatchGet: "BatchGetItem",
  BatchWrite: "BatchWriteItem",
};

const TRANSACTION_ITEM_ACTIONS: Readonly<Record<string, string>> = {
  Put: "PutItem",
  Update: "UpdateItem",
  Delete: "DeleteItem",
  ConditionCheck: "ConditionCheckItem",
};

/** The IAM action of one SDK command; null for a transaction, whose items are authorized instead. */
function actionOf(service: string, command: string): string | null {
  const operation = command.replace(/Command$/, "");
  if (service === "dynamodb") {
    if (operation === "TransactWrite" || operation === "TransactWriteItems") return null;
    return `dynamodb:${DOCUMENT_OPERATIONS[operation] ?? operation}`;
  }
  // The batch operations are authorized by the single-message action.
  if (service === "sqs") return `sqs:${operation.replace(/Batch$/, "")}`;
  if (service === "lambda" && operation === "Invoke") return "lambda:InvokeFunction";
  throw new Error(`${service} ${command}: teach test/infra/support/reachable-calls.ts its action`);
}

/** The `{ … }` literal whose `{` is at `open`, braces included. */
function literalAt(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(open, i + 1);
  }
  return text.slice(open);
}

/**
 * Where the object literal the identifier `name` used at `use` holds begins, as `const runUpdate =
 * { … }` in the same function declares it (the nearest declaration before the use, so another
 * function's `update` is not taken for it); null where it is declared otherwise or elsewhere (a
 * parameter, a call's result).
 */
function literalNamed(text: string, name: string, use: number): number | null {
  const declared = new RegExp(
    `(?:^|[^\\w$])(?:const|let|var)\\s+${name.replaceAll("$", "\\$")}\\s*=\\s*`,
    "g",
  );
  const last = [...text.slice(0, use).matchAll(declared)].at(-1);
  if (last === undefined || siteAt(text, last.index) !== siteAt(text, use)) return null;
  const value = last.index + last[0].length;
  return text[value] === "{" ? value : null;
}

/**
 * Where the literal of a command's or a transaction item's input written at `at` begins: there
 * (`{ TableName: … }`), or where the literal a bare identifier there holds does (`runUpdate`);
 * null where neither can be read.
 */
function inputAt(text: string, at: number): number | null {
  if (text[at] === "{") return at;
  const identifier = /^([\w$]+)\s*[,)}]/.exec(text.slice(at, at + 200))?.[1];
  return identifier === undefined ? null : literalNamed(text, identifier, at);
}

/**
 * The expression the literal beginning at `open` gives its own `key` (`TableName`, `IndexName`),
 * not one of an object nested in it; failing that, the one a literal it spreads gives (`{
 * ...update, ReturnValues: "ALL_NEW" }`, the later spread first, each declared before it, so the
 * search ends); undefined when none does.
 */
function keyOf(text: string, open: number | null, key: string): string | undefined {
  if (open === null) return undefined;
  let depth = 0;
  const spread: string[] = [];
  const parts = new RegExp(`[{}]|\\b${key}:\\s*([\\w$.]+)|\\.\\.\\.([\\w$]+)`, "g");
  for (const match of literalAt(text, open).matchAll(parts)) {
    if (match[0] === "{") depth++;
    else if (match[0] === "}") depth--;
    else if (depth !== 1) continue;
    else if (match[2] !== undefined) spread.unshift(match[2]);
    else return match[1];
  }
  for (const name of spread) {
    const value = keyOf(text, literalNamed(text, name, open), key);
    if (value !== undefined) return value;
  }
  return undefined;
}

/**
 * `engine2.tables.jobs`, `tables.runs` or a parameter named for its table (`jobsTable`) → `jobs`,
 * `runs`; anything else (a parameter named otherwise): null.
 */
function tableOf(expression: string | undefined): string | null {
  const text = expression ?? "";
  return /(?:^|\.)tables\.(\w+)$/.exec(text)?.[1] ?? /^(\w+)Table\d*$/.exec(text)?.[1] ?? null;
}

/** `RUNS_INFLIGHT_INDEX` (esbuild may rename it `RUNS_INFLIGHT_INDEX2`) → `inflight`. */
function indexOf(expression: string | undefined): string | null {
  if (expression === undefined) return null;
  const literal = /^["']([^"']+)["']$/.exec(expression)?.[1];
  if (literal !== undefined) return literal;
  const value = INDEX_CONSTANTS[expression.replace(/\d+$/, "")];
  if (value === undefined) throw new Error(`IndexName ${expression}: not a known index constant`);
  return value;
}

/** Which source file and function of the bundle each offset lies in, for messages. */
function siteAt(text: string, offset: number): string {
  const before = text.slice(0, offset);
  const file = [...before.matchAll(/^\/\/ (\S+\.ts)$/gm)].at(-1)?.[1] ?? "?";
  const fn = [...before.matchAll(/^(?:export )?(?:async )?function\*? (\w+)/gm)].at(-1)?.[1];
  return fn === undefined ? file : `${file} ${fn}`;
}

/**
 * The handler at `entry` bundled as `cdk synth` bundles it, tree-shaken, unminified, the packages
 * left as imports: the project code that can run in that function, with a `// <file>` line before
 * each file's part.
 */
export async function treeShakenBundle(entry: string): Promise<string> {
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    platform: "node",
    format: "esm",
    target: "node22",
    mainFields: ["module", "main"],
    packages: "external",
    treeShaking: true,
    minify: false,
    logLevel: "silent",
  });
  return result.outputFiles[0]?.text ?? "";
}

/**
 * Local name → [package, exported name] of the bundle's imports of the SDK. Refuses, naming the
 * package and where it is imported, what this reading would not see the calls of: a package it
 * has no service for (`@aws-sdk/client-s3`), the SDK imported other than by name (`import * as`,
 * `import()`), and a name that is not a command, a client or an error class: an aggregated
 * client (`DynamoDBDocument`, whose `doc.get(…)` builds its command inside the SDK), a paginator
 * or a waiter.
 */
function sdkImports(text: string): Map<string, [string, string]> {
  const imported = new Map<string, [string, string]>();
  const read: [number, number][] = [];
  for (const match of text.matchAll(/^import\s*\{([^}]*)\}\s*from\s*"(@aws-sdk\/[^"]+)";$/gm)) {
    const pkg = match[2] ?? "";
    if (NO_CALL_PACKAGES.has(pkg)) {
      read.push([match.index, match.index + match[0].length]);
      continue;
    }
    if (!(pkg in SERVICE_OF_PACKAGE)) continue;
    read.push([match.index, match.index + match[0].length]);
    for (const part of (match[1] ?? "").split(",")) {
      const [exported, local] = part.trim().split(/\s+as\s+/);
      if (!exported) continue;
      if (!/(?:Command|Client|Exception|Error)$/.test(exported)) {
        throw new Error(
          `${exported} from ${pkg} (${siteAt(text, match.index)}): not a command, a client or an error class, but an aggregated client, a paginator or a waiter, whose methods build their commands inside the SDK where this reading does not see them; send commands (client.send(new GetCommand(…))), or teach test/infra/support/reachable-calls.ts to read it`,
        );
      }
      imported.set(local ?? exported, [pkg, exported]);
    }
  }
  for (const match of text.matchAll(/["'`](@aws-sdk\/[^"'`]+)["'`]/g)) {
    if (read.some(([from, to]) => match.index >= from && match.index < to)) continue;
    const pkg = match[1] ?? "";
    const why =
      pkg in SERVICE_OF_PACKAGE || NO_CALL_PACKAGES.has(pkg)
        ? "imported other than by name (import * as, a default import, import(), require), so its commands are not seen"
        : "a package this reading has no service for, so its calls' IAM actions are not known";
    throw new Error(
      `${pkg} (${siteAt(text, match.index)}): ${why}; teach test/infra/support/reachable-calls.ts to read it`,
    );
  }
  return imported;
}

/** Every AWS call the handler at `entry` can make, as described above. */
export async function reachableCalls(entry: string): Promise<ReachableCall[]> {
  const text = await treeShakenBundle(entry);
  const imported = sdkImports(text);
  const calls: ReachableCall[] = [];
  let sendsTransactions = false;
  for (const match of text.matchAll(/\bnew\s+([\w$]+)\s*\(/g)) {
    const [pkg, command] = imported.get(match[1] ?? "") ?? [];
    if (pkg === undefined || command === undefined || !command.endsWith("Command")) continue;
    const service = SERVICE_OF_PACKAGE[pkg] ?? "";
    const action = actionOf(service, command);
    if (action === null) {
      sendsTransactions = true;
      continue;
    }
    const input = service === "dynamodb" ? inputAt(text, match.index + match[0].length) : null;
    calls.push({
      action,
      table: tableOf(keyOf(text, input, "TableName")),
      index: indexOf(keyOf(text, input, "IndexName")),
      site: siteAt(text, match.index),
    });
  }
  if (sendsTransactions) {
    // An item's input written in place or held by an identifier (`{ Update: runUpdate }`); one
    // made otherwise (a call's result) is still an item, of a table not known here.
    for (const match of text.matchAll(/\b(Put|Update|Delete|ConditionCheck)\s*:\s*(?=[{\w$])/g)) {
      const input = inputAt(text, match.index + match[0].length);
      calls.push({
        action: `dynamodb:${TRANSACTION_ITEM_ACTIONS[match[1] ?? ""]}`,
        table: tableOf(keyOf(text, input, "TableName")),
        index: null,
        site: `${siteAt(text, match.index)} (a transaction item)`,
      });
    }
  }
  return calls;
}
