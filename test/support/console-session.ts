import type { Page } from "playwright-core";
import { type Browser, launchBrowser } from "./browser.js";
import {
  type SandboxProcess,
  type SandboxProcessOptions,
  spawnSandbox,
} from "./sandbox-process.js";

/**
 * `method path` on the API at `apiUrl` with a tenant's bearer `key` (and `body` as JSON): its
 * answer parsed, or an error naming the request and the answer for any other status than a 2xx.
 */
export async function apiAs<T>(
  apiUrl: string,
  key: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const response = await fetch(`${apiUrl}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text) as T;
}

/**
 * The sandbox (`npm start`, `options` as given, `key` the only API key, for `tenant`) and headless
 * Chromium started together, and a page of it on the console signed in with `key`: the jobs list
 * shown.
 */
export async function signedInConsole(
  key: string,
  tenant: string,
  options: SandboxProcessOptions = {},
): Promise<{ sandbox: SandboxProcess; browser: Browser; page: Page }> {
  const [sandbox, browser] = await Promise.all([
    spawnSandbox({ ...options, env: { ...options.env, SCHEDULER_API_KEYS: `${key}=${tenant}` } }),
    launchBrowser(),
  ]);
  const page = await browser.context.newPage();
  await page.goto(`${sandbox.url}/console`);
  await page.getByLabel("API key", { exact: true }).fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
  return { sandbox, browser, page };
}
