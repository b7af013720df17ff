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
 * call some path can send, however rare. Where the command names its table (`TableName:
 * engine.tables.jobs`) and index in its own input, the call says which; otherwise only the
 * action is known. A transaction's items are read the same way, wherever an item literal names
 * its table (`Put: { TableName: engine.tables.runs, … }`).
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

/** The text of the parenthesized arguments starting at `open` (the index of `(`). */
function argumentsAt(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === "(") depth++;
    else if (text[i] === ")" && --depth === 0) return text.slice(open + 1, i);
  }
  return text.slice(open + 1);
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

/** Every AWS call the handler at `entry` can make, as described above. */
export async function reachableCalls(entry: string): Promise<ReachableCall[]> {
  const text = await treeShakenBundle(entry);
  // Local name → [package, exported name], from the bundle's imports of the SDK.
  const imported = new Map<string, [string, string]>();
  for (const match of text.matchAll(/^import\s*\{([^}]*)\}\s*from\s*"([^"]+)";$/gm)) {
    const pkg = match[2] ?? "";
    if (!(pkg in SERVICE_OF_PACKAGE)) continue;
    for (const part of (match[1] ?? "").split(",")) {
      const [exported, local] = part.trim().split(/\s+as\s+/);
      if (exported) imported.set(local ?? exported, [pkg, exported]);
    }
  }
  const calls: ReachableCall[] = [];
  let sendsTransactions = false;
  for (const match of text.matchAll(/\bnew\s+([\w$]+)\s*\(/g)) {
    const [pkg, command] = imported.get(match[1] ?? "") ?? [];
    if (pkg === undefined || command === undefined || !command.endsWith("Command")) continue;
    const service = SERVICE_OF_PACKAGE[pkg] ?? "";
    const action = actionOf(service, command);
    const offset = match.index ?? 0;
    if (action === null) {
      sendsTransactions = true;
      continue;
    }
    const input = argumentsAt(text, offset + match[0].length - 1);
    calls.push({
      action,
      table: service === "dynamodb" ? tableOf(/\bTableName:\s*([\w$.]+)/.exec(input)?.[1]) : null,
      index: service === "dynamodb" ? indexOf(/\bIndexName:\s*([\w$.]+)/.exec(input)?.[1]) : null,
      site: siteAt(text, offset),
    });
  }
  if (sendsTransactions) {
    const items = /\b(Put|Update|Delete|ConditionCheck)\s*:\s*\{\s*TableName:\s*([\w$.]+)/g;
    for (const match of text.matchAll(items)) {
      calls.push({
        action: `dynamodb:${TRANSACTION_ITEM_ACTIONS[match[1] ?? ""]}`,
        table: tableOf(match[2]),
        index: null,
        site: `${siteAt(text, match.index ?? 0)} (a transaction item)`,
      });
    }
  }
  return calls;
}
