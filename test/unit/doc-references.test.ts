import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { servedDocument } from "../../client/generate.js";
import { buildConsoleAssets } from "../../shared/console/build.js";

/**
 * What a newcomer follows word by word in README.md, CONTRIBUTING.md and docs/: every relative
 * link opens a file of the repository (and its `#anchor` a heading there, as GitHub names it),
 * every section a doc sends the reader to by its title (`docs/architecture.md "Known limits"`,
 * `(docs/api.md, "Long jobs")`) is a heading or a paragraph's bold title of that doc, every
 * `npm run …` is a script of package.json, every repository path written in backticks exists,
 * and the console bundle's size is the one docs/console.md gives.
 */

const REPO = resolve(import.meta.dirname, "../..");
const read = (path: string) => readFileSync(join(REPO, path), "utf8");

const GUIDES = [
  "README.md",
  "CONTRIBUTING.md",
  ...readdirSync(join(REPO, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
];
/** The changelog's links must resolve too; its prose tells of sections as they were. */
const LINKING = [...GUIDES, "CHANGELOG.md"];

/** The doc's prose: fenced code blocks removed, their lines kept blank so line numbers hold. */
const prose = (doc: string) =>
  read(doc).replace(/^```[^\n]*\n[\s\S]*?^```$/gm, (block) => block.replace(/[^\n]/g, ""));

/** The line of `index` in `text`, 1-based, for the failure's message. */
const lineAt = (text: string, index: number) => text.slice(0, index).split("\n").length;

/** GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens. */
const slug = (heading: string) =>
  heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

function anchorsOf(doc: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const [, heading = ""] of prose(doc).matchAll(/^#{1,6}\s+(.*)$/gm)) {
    const base = slug(heading);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** The titles a doc can be sent to by: its headings and its paragraphs' (or items') bold titles. */
function titlesOf(doc: string): Set<string> {
  const titles = new Set<string>();
  for (const match of prose(doc).matchAll(/^(?:#{1,6}\s+(.*)|(?:- |\d+\. )?\*\*([^*]+)\*\*)/gm)) {
    const title = (match[1] ?? match[2] ?? "").trim().replace(/[.:]$/, "").replace(/`/g, "");
    titles.add(title);
    // "Dependencies: a job after other jobs" is the "Dependencies" section.
    titles.add(title.split(": ")[0] ?? title);
  }
  return titles;
}

describe("the docs' references", () => {
  it("link to files of the repository, and to headings that are there", () => {
    const broken: string[] = [];
    let checked = 0;
    for (const doc of LINKING) {
      // Inline code is not a link: `[x](y)` in backticks stays text.
      const text = prose(doc).replace(/`[^`\n]*`/g, (code) => " ".repeat(code.length));
      for (const match of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const link = match[1] ?? "";
        if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // http(s):, mailto:
        checked += 1;
        const [path = "", anchor] = link.split("#");
        const target = path === "" ? join(REPO, doc) : resolve(dirname(join(REPO, doc)), path);
        const where = `${doc}:${lineAt(text, match.index ?? 0)}: ${link}`;
        if (!target.startsWith(REPO) || !existsSync(target)) broken.push(`${where} (no such file)`);
        else if (anchor !== undefined && target.endsWith(".md")) {
          if (!anchorsOf(relative(REPO, target)).has(anchor)) broken.push(`${where} (no heading)`);
        }
      }
    }
    expect(checked).toBeGreaterThan(30);
    expect(broken).toEqual([]);
  });

  it("send the reader to sections by titles the doc has", () => {
    const DOC_NAMES: Record<string, string> = {
      README: "README.md",
      "README.md": "README.md",
    };
    for (const doc of GUIDES.filter((d) => d.startsWith("docs/"))) {
      DOC_NAMES[doc] = doc;
      DOC_NAMES[doc.slice("docs/".length)] = doc;
    }
    const names = Object.keys(DOC_NAMES)
      .sort((a, b) => b.length - a.length)
      .map((name) => name.replace(/[.]/g, "\\."))
      .join("|");
    // `docs/api.md "Long jobs"`, `docs/api.md, "Long jobs"`, `[docs/api.md](docs/api.md), "…"`:
    // the doc's name, then (on the same line or the next) the section's title in double quotes.
    const reference = new RegExp(
      `(?<![\\w/])(${names})\`?(?:\\]\\([^)]*\\))?,?\\s+(?:section\\s+)?"([^"\\n]{2,80})"`,
      "g",
    );
    const unknown: string[] = [];
    let checked = 0;
    for (const doc of GUIDES) {
      const text = prose(doc);
      for (const match of text.matchAll(reference)) {
        const target = DOC_NAMES[match[1] ?? ""] ?? "";
        const title = (match[2] ?? "").replace(/`/g, "");
        checked += 1;
        if (!titlesOf(target).has(title))
          unknown.push(`${doc}:${lineAt(text, match.index ?? 0)}: ${target} "${title}"`);
      }
    }
    expect(checked).toBeGreaterThan(30);
    expect(unknown).toEqual([]);
  });

  it("name npm scripts that package.json has", () => {
    const scripts = Object.keys(
      (JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts,
    );
    const named = new Set(
      LINKING.flatMap((doc) =>
        [...read(doc).matchAll(/\bnpm run ([a-z][a-z0-9:-]*[a-z0-9])/g)].map(([, name]) => name),
      ),
    );
    expect(named.size).toBeGreaterThan(10);
    expect([...named].filter((name) => name !== undefined && !scripts.includes(name))).toEqual([]);
  });

  it("name in backticks repository files that exist", () => {
    const FOLDERS = "shared|functions|client|infra|console|bench|test|examples|bin|docs|\\.ci";
    const path = new RegExp(`\`((?:${FOLDERS})/[^\`\\s*<>{}…]*)\``, "g");
    const missing: string[] = [];
    let checked = 0;
    for (const doc of GUIDES) {
      const text = read(doc);
      for (const match of text.matchAll(path)) {
        const named = (match[1] ?? "").replace(/[.,:]$/, "");
        checked += 1;
        if (!existsSync(join(REPO, named)))
          missing.push(`${doc}:${lineAt(text, match.index ?? 0)}: ${named}`);
      }
    }
    expect(checked).toBeGreaterThan(100);
    expect(missing).toEqual([]);
  });
});

describe("docs/console.md's figures", () => {
  it("give the console bundle's size (app.js and app.css) within a tenth", async () => {
    const doc = read("docs/console.md");
    const stated = /one `app\.css` \(about (\d+) KB with its dependencies/.exec(doc)?.[1];
    expect(stated, "docs/console.md names the bundle's size").toBeDefined();
    const assets = await buildConsoleAssets();
    const bytes = [...assets.files.values()].reduce(
      (sum, file) => sum + Buffer.byteLength(file.body),
      0,
    );
    const kilobytes = bytes / 1000;
    expect(Math.abs(kilobytes - Number(stated)) / kilobytes, `built: ${kilobytes} KB`).toBeLessThan(
      0.1,
    );
  });
});

describe("README.md's table of write units and dollars per million runs", () => {
  /** The figures of a requests bench's summary table, by scenario letter. */
  function benchFigures(file: string): Map<string, { writeUnits: string; dollars: string }> {
    const figures = new Map<string, { writeUnits: string; dollars: string }>();
    for (const [, letter = "", rest = ""] of read(file).matchAll(
      /^\| \(([a-e])\) [^|]*\|(.*)$/gm,
    )) {
      const cells = rest.split("|").map((cell) => cell.trim().replace(/\*/g, ""));
      figures.set(letter, {
        writeUnits: Number(cells[1]).toFixed(1),
        dollars: Number(cells[10]).toFixed(2),
      });
    }
    return figures;
  }

  it("gives in each column the figures of the bench result its link names", () => {
    const readme = read("README.md");
    const table = readme.indexOf("| run ");
    const header = readme.slice(table, readme.indexOf("\n", table)).split("|");
    const columns = (header[2] ?? "")
      .replace(/^\s*write units,/, "")
      .split("→")
      .map((name) => name.trim());
    expect(columns.length).toBeGreaterThanOrEqual(6);
    // The links of the paragraph above the table: a column's (`[12-01](…)`, `[2026-11-30](…)`),
    // or one scenario's of a column (`[11-30, b](…)`); the first of a label is the column's (a
    // later `[before](…)` is another comparison's).
    const links = new Map<string, string>();
    for (const [, label = "", path = ""] of readme
      .slice(readme.lastIndexOf("\n\n", table - 3), table)
      .matchAll(/\[([^\]]+)\]\((bench\/results\/[^)]+\.md)\)/g)) {
      const column = label.replace(/^2026-/, "");
      if (!links.has(column)) links.set(column, path);
    }
    const SCENARIOS: Record<string, string> = {
      "one-off, created inside the lookahead": "a",
      "one-off, claimed by a dispatcher pass": "b",
      "recurring (per-minute), steady state": "c",
      "one-off that fails once, then succeeds": "d",
      "one-off, created in a batch of 25": "e",
    };
    const differ: string[] = [];
    for (const [row, letter] of Object.entries(SCENARIOS)) {
      const line = readme.split("\n").find((text) => text.startsWith(`| ${row} `));
      expect(line, row).toBeDefined();
      const cells = (line ?? "").split("|").map((cell) => cell.trim());
      const writeUnits = (cells[2] ?? "").split("→").map((cell) => cell.trim());
      const dollars = (cells[3] ?? "").split("→").map((cell) => cell.replace(/\*/g, "").trim());
      columns.forEach((column, i) => {
        const file = links.get(`${column}, ${letter}`) ?? links.get(column);
        expect(file, `a link for the column ${column}`).toBeDefined();
        const measured = benchFigures(file ?? "").get(letter);
        const shown = { writeUnits: writeUnits[i], dollars: dollars[i] };
        const expected = measured ?? { writeUnits: "–", dollars: "–" };
        if (shown.writeUnits !== expected.writeUnits || shown.dollars !== expected.dollars)
          differ.push(
            `${row}, ${column}: README ${shown.writeUnits} WU $${shown.dollars}, ${file} ${expected.writeUnits} WU $${expected.dollars}`,
          );
      });
    }
    expect(differ).toEqual([]);
  });
});

describe("docs/api.md's Endpoints table", () => {
  /** `GET /jobs status,limit,cursor` for each row's routes: `· /resume` reuses the method and the
   * path but its last segment, `· PUT` the path, `?a=&b=` names the query parameters. */
  function documentedRoutes(): Map<string, string[]> {
    const doc = read("docs/api.md");
    const table = doc.slice(doc.indexOf("## Endpoints"), doc.indexOf("\nStatuses are "));
    const routes = new Map<string, string[]>();
    for (const row of table.split("\n").filter((line) => line.startsWith("| `"))) {
      let method = "";
      let path = "";
      for (const [, token = ""] of (row.split("|")[1] ?? "").matchAll(/`([^`]+)`/g)) {
        const full = /^([A-Z]+) (\/\S*)$/.exec(token);
        if (full) [, method = "", path = ""] = full;
        else if (/^[A-Z]+$/.test(token)) method = token;
        else if (token.startsWith("/")) path = path.replace(/\/[^/?]*(\?.*)?$/, token);
        else continue;
        const [route = "", query = ""] = path.split("?");
        routes.set(
          `${method} ${route}`,
          query
            .split("&")
            .map((pair) => pair.replace(/=.*$/, ""))
            .filter((name) => name !== ""),
        );
      }
    }
    return routes;
  }

  it("lists every operation of the OpenAPI document, with its query parameters", async () => {
    const document = (await servedDocument()) as {
      paths: Record<string, Record<string, { parameters?: { in: string; name: string }[] }>>;
    };
    const served = new Map<string, string[]>();
    for (const [path, operations] of Object.entries(document.paths))
      for (const [method, operation] of Object.entries(operations))
        served.set(
          `${method.toUpperCase()} ${path}`,
          (operation.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name),
        );
    expect(served.size).toBeGreaterThan(20);
    const documented = documentedRoutes();
    const differ = [...served].flatMap(([route, query]) => {
      const listed = documented.get(route);
      if (listed === undefined) return [`${route}: not in the table`];
      return [...query].sort().join(",") === [...listed].sort().join(",")
        ? []
        : [`${route}: the table's ?${listed.join("&")}, the API's ${query.join(", ")}`];
    });
    expect(differ).toEqual([]);
  });
});
