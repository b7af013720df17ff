import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

/**
 * .ci/run's decision to install Java, taken against a fake `java` on PATH: the script is sourced,
 * which defines its functions and runs none of its steps.
 */
const SCRIPT = join(import.meta.dirname, "../../.ci/run");
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/**
 * A PATH holding `awk` and, unless `versionOutput` is null, a `java` printing it to stderr, and
 * beside it a `javac` unless `javac` is false (a JRE).
 */
function pathWithJava(versionOutput: string | null, javac: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), "ci-run-"));
  dirs.push(dir);
  symlinkSync(which("awk"), join(dir, "awk"));
  if (versionOutput !== null) {
    // printf is the shell's own: the PATH has nothing else to print with.
    const quoted = `'${versionOutput.replaceAll("'", `'\\''`)}'`;
    writeFileSync(join(dir, "java"), `#!/bin/sh\nprintf '%s' ${quoted} >&2\n`);
    chmodSync(join(dir, "java"), 0o755);
    if (javac) {
      writeFileSync(join(dir, "javac"), "#!/bin/sh\n");
      chmodSync(join(dir, "javac"), 0o755);
    }
  }
  return dir;
}

function which(command: string): string {
  const found = spawnSync("/bin/sh", ["-c", `command -v ${command}`], { encoding: "utf8" });
  return found.stdout.trim();
}

/** Whether .ci/run would install Java with this `java -version` output (null: no java). */
function installsJava(versionOutput: string | null, { javac = true } = {}): boolean {
  const command = `source "${SCRIPT}" && needs_java_install`;
  // --norc and no stdin: a bash whose stdin is a socket reads ~/.bashrc, as one run by sshd would.
  const result = spawnSync(which("bash"), ["--norc", "-c", command], {
    env: { PATH: pathWithJava(versionOutput, javac) },
    stdio: ["ignore", "pipe", "pipe"],
    encoding: "utf8",
  });
  expect(result.stderr).toBe("");
  return result.status === 0;
}

const openjdk = (version: string) =>
  `openjdk version "${version}" 2024-07-16\nOpenJDK Runtime Environment (build ${version})\n`;

describe(".ci/run installs Java", () => {
  it("when there is no java", () => {
    expect(installsJava(null)).toBe(true);
  });

  it("when the java on PATH is older than 17", () => {
    expect(installsJava(openjdk("1.8.0_392"))).toBe(true);
    expect(installsJava('java version "11.0.2" 2019-01-15 LTS\n')).toBe(true);
    expect(installsJava(openjdk("16.0.2"))).toBe(true);
  });

  it("when the java on PATH is 17 or newer without javac (a JRE): the sandbox's DynamoDB Local launcher is compiled", () => {
    expect(installsJava(openjdk("17.0.12"), { javac: false })).toBe(true);
    expect(installsJava(openjdk("21"), { javac: false })).toBe(true);
  });

  it("when its version cannot be read", () => {
    expect(installsJava("Error: could not find libjava.so\n")).toBe(true);
  });

  it("not when it is 17 or newer, however its version is written", () => {
    expect(installsJava(openjdk("17.0.12"))).toBe(false);
    expect(installsJava(openjdk("21"))).toBe(false);
    expect(installsJava(openjdk("25-ea"))).toBe(false);
    expect(installsJava(`Picked up JAVA_TOOL_OPTIONS: -Xmx512m\n${openjdk("17.0.15")}`)).toBe(
      false,
    );
  });
});
