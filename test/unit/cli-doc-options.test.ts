import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { cliProgram } from "../../client/cli/main.js";

/**
 * docs/cli.md's command table is where an operator looks up what a command takes: each row names
 * its commands (`jobs pause ID …` · `resume ID`, a later one of the same group by its own name)
 * and their options, in the command cell or the description beside it; `[flags]` stands for the
 * flags of `jobs create`'s row. Every option a command has must be there, and every command.
 */

const REPO_ROOT = join(import.meta.dirname, "..", "..");

/** "jobs create" → its long options, for every command that does something (no subcommands). */
function commandsOf(program: Command): Map<string, string[]> {
  const found = new Map<string, string[]>();
  const walk = (command: Command, path: readonly string[]) => {
    for (const sub of command.commands) {
      const name = [...path, sub.name()];
      if (sub.commands.length > 0) walk(sub, name);
      else
        found.set(
          name.join(" "),
          sub.options.flatMap((option) => option.long ?? []).filter((long) => long !== "--help"),
        );
    }
  };
  walk(program, []);
  return found;
}

interface DocumentedCommand {
  /** The command's own synopsis in the command cell. */
  readonly synopsis: string;
  /** The whole row: its description documents options too. */
  readonly row: string;
}

function documentedCommands(): Map<string, DocumentedCommand> {
  const doc = readFileSync(join(REPO_ROOT, "docs", "cli.md"), "utf8");
  const section = doc.split(/^## The CLI$/m)[1]?.split(/^### /m)[0] ?? "";
  const found = new Map<string, DocumentedCommand>();
  for (const row of section.split("\n").filter((line) => line.startsWith("| `"))) {
    const commandCell = row.split(/ \| (?=[^`])/)[0] ?? "";
    let group = "";
    for (const [, synopsis = ""] of commandCell.matchAll(/`([a-z][^`]*)`/g)) {
      const words = synopsis.split(" ");
      const first = words[0] ?? "";
      const second = words[1] ?? "";
      // `jobs pause ID` opens the group; `resume ID` after it is `jobs resume`.
      const name = /^[a-z][a-z-]*$/.test(second) ? `${first} ${second}` : `${group} ${first}`;
      if (/^[a-z][a-z-]*$/.test(second)) group = first;
      found.set(name.trim(), { synopsis, row });
    }
  }
  return found;
}

describe("docs/cli.md's command table", () => {
  const commands = commandsOf(
    cliProgram({
      stdout: () => true,
      stderr: () => true,
      env: {},
      startedAt: new Date(0),
      signal: new AbortController().signal,
    }),
  );
  const documented = documentedCommands();

  it("has a row for every command, and no command the CLI lacks", () => {
    expect([...documented.keys()].sort()).toEqual([...commands.keys()].sort());
  });

  it("names every option of every command", () => {
    const createRow = documented.get("jobs create")?.row ?? "";
    const missing = [...commands].flatMap(([name, options]) => {
      const entry = documented.get(name);
      if (entry === undefined) return [];
      const text = entry.synopsis.includes("[flags]") ? `${entry.row} ${createRow}` : entry.row;
      return options
        .filter((option) => !new RegExp(`${option}(?![a-z-])`).test(text))
        .map((option) => `${name} ${option}`);
    });
    expect(missing).toEqual([]);
  });
});
