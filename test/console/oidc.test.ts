import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Provider from "oidc-provider";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalServer, startLocalServer } from "../../shared/api/local-server.js";
import type { ConsoleAssets } from "../../shared/console/assets.js";
import { buildConsoleAssets } from "../../shared/console/build.js";
import { PROVIDER_TIMEOUT_MS } from "../../shared/console/config.js";
import { jobTypeCatalog } from "../../shared/job-types/registry.js";
import { listJobs } from "../../shared/jobs/queries.js";
import { accessibilityViolations, type Browser, launchBrowser } from "../support/browser.js";
import { createEngineFixture, type EngineFixture } from "../support/engine-fixture.js";
import { waitFor } from "../support/wait.js";

/**
 * The stack's JWT option, end to end in a browser: a real OpenID Connect
 * provider (the `oidc-provider` package, with its development login and
 * consent pages) on loopback, the API checking its tokens as API Gateway's
 * JWT authorizer would (SCHEDULER_JWT_ISSUER / SCHEDULER_JWT_AUDIENCE), and
 * the console signing in with the authorization code flow and PKCE. Shaped
 * like Amazon Cognito, the provider's token endpoint is not on the issuer's
 * origin (another port here), so the page's Content-Security-Policy must name
 * it too.
 */
const AUDIENCE = "scheduler-api";
const CLIENT_ID = "scheduler-console";
const RESOURCE = "urn:scheduler:api";

let fixture: EngineFixture;
let idpServer: Server;
let issuer: string;
/** Where the provider's token endpoint is: another origin than the issuer's. */
let tokenServer: Server;
let tokenOrigin: string;
let api: LocalServer;
let browser: Browser;
let page: Page;
/** Every authorization request the console sent to the provider. */
const authorizationRequests: URL[] = [];

/**
 * While set, the provider accepts that request and does not answer it (a provider that is down
 * behind a load balancer, or overloaded): the request waits in `held` until the test releases it.
 */
const hang = { discovery: false, token: false };
interface HeldRequest {
  readonly path: string;
  /** Hands the request to the provider, which answers it now: a late answer. */
  readonly release: () => void;
  /** Settles once its connection is done with: answered, or given up by the browser. */
  readonly closed: Promise<void>;
}
const held: HeldRequest[] = [];

beforeAll(async () => {
  // The tables and queues, the console's bundle and Chromium, made side by side.
  let consoleAssets: ConsoleAssets;
  [fixture, consoleAssets, browser] = await Promise.all([
    createEngineFixture(),
    buildConsoleAssets(),
    launchBrowser(),
  ]);
  // The provider needs its own URL (the issuer) before it exists, and the console's URL
  // (its client's redirect URI) before it answers: listen first, hand requests over after.
  let handle: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const hold = (req: IncomingMessage, res: ServerResponse) => {
    held.push({
      path: req.url ?? "",
      release: () => handle?.(req, res),
      closed: new Promise((resolve) => res.once("close", resolve)),
    });
  };
  idpServer = createServer((req, res) => {
    if (req.url?.startsWith("/auth")) authorizationRequests.push(new URL(req.url, issuer));
    // As at Cognito, the issuer's origin has no token endpoint.
    if (req.url?.startsWith("/token")) res.writeHead(404).end();
    else if (hang.discovery && req.url?.startsWith("/.well-known/")) hold(req, res);
    else if (handle) handle(req, res);
    else res.writeHead(503).end();
  });
  tokenServer = createServer((req, res) => {
    if (hang.token && req.url?.startsWith("/token")) hold(req, res);
    else if (handle && req.url?.startsWith("/token")) handle(req, res);
    else res.writeHead(404).end();
  });
  const listen = async (server: Server) => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };
  issuer = await listen(idpServer);
  tokenOrigin = await listen(tokenServer);

  api = await startLocalServer({
    engine: fixture.engine,
    jobTypes: jobTypeCatalog({ demoTypes: false }),
    env: {
      SCHEDULER_JWT_ISSUER: issuer,
      SCHEDULER_JWT_AUDIENCE: AUDIENCE,
      SCHEDULER_CONSOLE_CLIENT_ID: CLIENT_ID,
      SCHEDULER_CONSOLE_SCOPE: "openid scheduler",
    },
    consoleAssets,
  });

  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENT_ID,
        // A public client: no secret, so the provider requires PKCE.
        token_endpoint_auth_method: "none",
        redirect_uris: [`${api.url}/console/callback`],
        grant_types: ["authorization_code"],
        response_types: ["code"],
      },
    ],
    scopes: ["openid", "scheduler"],
    features: {
      devInteractions: { enabled: true },
      // Access tokens as JWTs for the API's audience, as API Gateway's JWT authorizer needs them.
      resourceIndicators: {
        enabled: true,
        defaultResource: () => RESOURCE,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: "scheduler",
          audience: AUDIENCE,
          accessTokenFormat: "jwt",
          accessTokenTTL: 600,
        }),
      },
    },
    findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
    ttl: { IdToken: 600 },
  });
  // The discovery document sends the browser to the token server for the code exchange.
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path === "/.well-known/openid-configuration" && typeof ctx.body === "object") {
      ctx.body = { ...ctx.body, token_endpoint: `${tokenOrigin}/token` };
    }
  });
  const callback = provider.callback();
  handle = (req, res) => void callback(req, res);
  page = await browser.context.newPage();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await api?.close();
  await new Promise((resolve) => idpServer?.close(resolve));
  await new Promise((resolve) => tokenServer?.close(resolve));
  await fixture?.destroy();
});

describe("console sign-in with OIDC (the stack's JWT option)", () => {
  it("refuses API requests without a token from the issuer", async () => {
    const response = await fetch(`${api.url}/jobs`, {
      headers: { Authorization: "Bearer not-a-token" },
    });
    expect(response.status).toBe(401);
  });

  it("signs in at the provider with PKCE, then creates a job as the token's subject", async () => {
    await page.goto(`${api.url}/console/dead-letters`);
    await page.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).click();

    // The provider's development login and consent pages.
    await page.waitForURL(`${issuer}/**`);
    await page.locator('input[name="login"]').fill("alice");
    await page.locator('input[name="password"]').fill("any");
    await page.locator('button[type="submit"]').click();
    await page.getByRole("button", { name: "Continue" }).click();

    // Back where the user started, signed in; a refused code exchange would leave an alert instead.
    await page
      .getByRole("heading", { name: "Dead letters", level: 1 })
      .or(page.getByRole("alert"))
      .waitFor();
    expect(browser.errors.filter((e) => e.includes("Content Security Policy"))).toEqual([]);
    await page.waitForURL(`${api.url}/console/dead-letters`);
    await page.getByRole("button", { name: "Sign out (alice)" }).waitFor();
    // The access token is kept in this tab's sessionStorage and nowhere else: not in
    // localStorage, not in a cookie, not in the address (the callback's code is replaced).
    const stored = await page.evaluate(
      "JSON.stringify([{ ...sessionStorage }, { ...localStorage }, location.search + location.hash])",
    );
    const [session, local, address] = JSON.parse(String(stored)) as [
      Record<string, string>,
      Record<string, string>,
      string,
    ];
    expect(Object.keys(session)).toEqual(["scheduler.credential"]);
    const { token } = JSON.parse(session["scheduler.credential"] ?? "{}") as { token?: string };
    expect(token).toMatch(/^ey/);
    expect([local, address]).toEqual([{}, ""]);
    const cookies = await browser.context.cookies();
    expect(cookies.filter((cookie) => token && cookie.value.includes(token))).toEqual([]);

    const [request] = authorizationRequests;
    expect(request?.searchParams.get("code_challenge_method")).toBe("S256");
    expect(request?.searchParams.get("code_challenge")).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(request?.searchParams.get("client_id")).toBe(CLIENT_ID);

    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    await page.getByText("Create a job", { exact: true }).click();
    const form = page.getByRole("form", { name: "Create a job" });
    await form.getByLabel("Name", { exact: true }).fill("signed in");
    await form.getByRole("button", { name: "Create job" }).click();
    await page.waitForURL(/\/console\/jobs\/[0-9A-Z]+$/);
    await page.getByRole("heading", { name: /signed in/, level: 1 }).waitFor();

    // The job belongs to the token's subject (no tenant_id claim: tenant sub:<sub>).
    const page1 = await listJobs(fixture.engine, "sub:alice", { limit: 10 });
    expect(page1.items.map((job) => job.name)).toEqual(["signed in"]);
  });

  it("asks to sign in again once the user signs out, and reached nothing but the API and the provider", async () => {
    await page.getByRole("button", { name: "Sign out (alice)" }).click();
    await page.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).waitFor();
    // The console's pages reach the API, the issuer and the token endpoint only (the provider's
    // own login page is its business).
    const apiOrigin = new URL(api.url).origin;
    const fromConsole = browser.requested.filter((r) => r.from.startsWith(`${apiOrigin}/`));
    expect(fromConsole.length).toBeGreaterThan(5);
    const elsewhere = fromConsole
      .map((r) => r.url)
      .filter((url) => ![apiOrigin, issuer, tokenOrigin].includes(new URL(url).origin));
    expect(elsewhere).toEqual([]);
    expect(fromConsole.map((r) => r.url)).toContain(`${tokenOrigin}/token`);
    expect(await page.evaluate("sessionStorage.length")).toBe(0);
  });

  it("after Sign out, the next sign-in in this browser asks the provider to authenticate again", async () => {
    // The provider still holds alice's session: without asking it for a new login, the next
    // person at this browser would be signed in as alice by a click on "Sign in".
    const other = await browser.context.newPage();
    await other.goto(`${api.url}/console`);
    await other.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).click();
    const login = other.locator('input[name="login"]');
    await login
      .or(other.getByRole("button", { name: /^Sign out/ }))
      .first()
      .waitFor();
    expect(await other.getByRole("button", { name: /^Sign out/ }).count()).toBe(0);
    expect(authorizationRequests.at(-1)?.searchParams.get("prompt")).toBe("login");
    await login.fill("bob");
    await other.locator('input[name="password"]').fill("any");
    await other.locator('button[type="submit"]').click();
    await other.getByRole("button", { name: "Continue" }).click();
    await other.getByRole("button", { name: "Sign out (bob)" }).waitFor();

    // Signed in again: the sign-in after that is the provider's single sign-on as before.
    await other.reload();
    await other.evaluate("sessionStorage.clear()");
    await other.reload();
    await other.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).click();
    await other.getByRole("button", { name: "Sign out (bob)" }).waitFor();
    expect(authorizationRequests.at(-1)?.searchParams.has("prompt")).toBe(false);
    await other.close();
  });

  /**
   * The link an attacker sends: the callback as the provider would answer a sign-in the attacker
   * started (its own code and state), to sign the victim's tab in as the attacker.
   */
  const attackersCallback = () =>
    `${api.url}/console/callback?${new URLSearchParams({
      code: "attackers-code",
      state: "attackers-state",
      iss: issuer,
    })}`;

  const tokenRequests = () =>
    browser.requested.filter((r) => r.url.startsWith(`${tokenOrigin}/token`)).length;

  it("refuses a callback this tab did not start (login CSRF): no code exchanged, nobody signed in", async () => {
    const callback = attackersCallback();
    const before = tokenRequests();
    const victim = await browser.context.newPage();
    await victim.goto(callback);
    await victim.getByRole("alert").getByText("no sign-in was started in this tab").waitFor();
    expect(tokenRequests()).toBe(before);
    expect(await victim.evaluate("sessionStorage.length")).toBe(0);
    await victim.close();
  });

  it("says why a callback signed nobody in, and leads back to the sign-in", async () => {
    const tab = await browser.context.newPage();
    const before = tokenRequests();
    // A bookmark of the callback, with or without its trailing slash: no sign-in was started.
    for (const path of ["/console/callback", "/console/callback/"]) {
      await tab.goto(`${api.url}${path}`);
      await tab
        .getByRole("heading", { name: "Sign-in did not finish", level: 1 })
        .waitFor({ timeout: 5_000 });
      await tab.getByRole("alert").getByText("no sign-in was started in this tab").waitFor();
      await tab.getByRole("link", { name: "Back to sign-in" }).click();
      await tab.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).waitFor();
      expect(tab.url(), path).toBe(`${api.url}/console`);
    }

    // The provider refuses (the user declined consent): it sends the browser back with an error.
    const auth = (url: URL) => url.origin === issuer && url.pathname === "/auth";
    await tab.route(auth, (route) => {
      const request = new URL(route.request().url());
      const back = new URL(request.searchParams.get("redirect_uri") ?? "");
      back.search = new URLSearchParams({
        error: "access_denied",
        error_description: "End-User aborted interaction",
        state: request.searchParams.get("state") ?? "",
        iss: issuer,
      }).toString();
      return route.fulfill({ status: 303, headers: { Location: back.href } });
    });
    await tab.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).click();
    await tab
      .getByRole("heading", { name: "Sign-in did not finish", level: 1 })
      .waitFor({ timeout: 5_000 });
    // Who refused, and what it said.
    const said = await tab.getByRole("alert").textContent();
    expect(said).toContain(new URL(issuer).host);
    expect(said).toContain("access_denied: End-User aborted interaction");
    expect(await accessibilityViolations(tab)).toEqual([]);
    await tab.unroute(auth);
    await tab.getByRole("link", { name: "Back to sign-in" }).click();
    await tab.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).waitFor();
    expect(tokenRequests()).toBe(before);
    expect(await tab.evaluate("sessionStorage.length")).toBe(0);
    await tab.close();
  });

  it("refuses a callback whose state is not the sign-in this tab started", async () => {
    const callback = attackersCallback();
    const before = tokenRequests();
    const victim = await browser.context.newPage();
    // The victim starts a sign-in of its own, which never comes back (a 204 leaves the tab on the
    // console), then follows the link.
    await victim.route(
      (url) => url.origin === issuer && url.pathname === "/auth",
      (route) => route.fulfill({ status: 204 }),
    );
    await victim.goto(`${api.url}/console`);
    await victim.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ }).click();
    await waitFor(
      "the sign-in to be started",
      async () => (await victim.evaluate("sessionStorage.getItem('scheduler.signIn')")) !== null,
    );
    await victim.goto(callback);
    await victim.getByRole("alert").getByText('unexpected "state"', { exact: false }).waitFor();
    expect(tokenRequests()).toBe(before);
    expect(await victim.evaluate("sessionStorage.length")).toBe(0);
    await victim.close();
  });

  /** The next request the provider holds unanswered; it answers the ones after it again. */
  const heldRequest = async (path: string) => {
    const request = await waitFor("the provider to hold a request", () =>
      held.find((r) => r.path.startsWith(path)),
    );
    hang.discovery = false;
    hang.token = false;
    held.splice(held.indexOf(request), 1);
    return request;
  };

  /** Sends the late answer, and gives the page time to act on it if it still listens. */
  const answerLate = async (tab: Page, request: HeldRequest) => {
    request.release();
    await request.closed;
    await tab.waitForTimeout(500);
  };

  it("gives up on a discovery document that does not come, says so, and the next click goes to the provider", async () => {
    // The page's clock is the test's: the wait ends at a fast-forward, not after 15 real seconds.
    const tab = await browser.context.newPage();
    await tab.clock.install();
    await tab.goto(`${api.url}/console`);
    const signIn = tab.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ });
    const before = authorizationRequests.length;
    hang.discovery = true;
    await signIn.click();
    const late = await heldRequest("/.well-known/openid-configuration");
    await tab.clock.fastForward(PROVIDER_TIMEOUT_MS);

    // What did not answer, and how long the console waited; the button is the way on.
    const alert = tab.getByRole("alert");
    await alert.waitFor({ timeout: 5_000 });
    const said = await alert.textContent();
    expect(said).toContain(`${issuer}/.well-known/openid-configuration`);
    expect(said).toContain("did not answer within 15 s");
    expect(await accessibilityViolations(tab)).toEqual([]);
    expect(await tab.evaluate("sessionStorage.length")).toBe(0);

    // The answer that comes after the console gave up does not send the tab to the provider.
    await answerLate(tab, late);
    expect(authorizationRequests.length).toBe(before);
    expect(tab.url()).toBe(`${api.url}/console`);
    expect(await alert.textContent()).toBe(said);
    expect(await tab.evaluate("sessionStorage.length")).toBe(0);

    // The next click goes to the provider, which leaves the tab here (a 204).
    const auth = (url: URL) => url.origin === issuer && url.pathname === "/auth";
    await tab.route(auth, (route) => route.fulfill({ status: 204 }));
    const toProvider = tab.waitForRequest((request) => auth(new URL(request.url())));
    await signIn.click();
    await toProvider;
    await tab.close();
  });

  it("gives up on a token endpoint that does not answer, says so, drops its late token, and signs in again", async () => {
    const tab = await browser.context.newPage();
    await tab.clock.install();
    await tab.goto(`${api.url}/console`);
    // A login at the provider every time (as after Sign out), whoever the tests before signed in.
    await tab.evaluate("localStorage.setItem('scheduler.signedOut', 'true')");
    const signIn = tab.getByRole("button", { name: /^Sign in with 127\.0\.0\.1/ });
    const logIn = async () => {
      await tab.locator('input[name="login"]').fill("carol");
      await tab.locator('input[name="password"]').fill("any");
      await tab.locator('button[type="submit"]').click();
    };
    await signIn.click();
    await logIn();
    hang.token = true;
    await tab.getByRole("button", { name: "Continue" }).click();
    const late = await heldRequest("/token");
    await tab.clock.fastForward(PROVIDER_TIMEOUT_MS);

    await tab
      .getByRole("heading", { name: "Sign-in did not finish", level: 1 })
      .waitFor({ timeout: 5_000 });
    const said = await tab.getByRole("alert").textContent();
    expect(said).toContain(`${tokenOrigin}/token`);
    expect(said).toContain("did not answer within 15 s");
    expect(await accessibilityViolations(tab)).toEqual([]);
    expect(await tab.evaluate("sessionStorage.length")).toBe(0);

    // The provider's token, after the console gave up: nobody is signed in behind the message.
    await answerLate(tab, late);
    expect(await tab.evaluate("sessionStorage.length")).toBe(0);
    expect(await tab.getByRole("button", { name: /^Sign out/ }).count()).toBe(0);
    expect(await tab.getByRole("alert").textContent()).toBe(said);

    await tab.getByRole("link", { name: "Back to sign-in" }).click();
    await signIn.click();
    await logIn();
    // The provider may remember carol's consent from the first attempt.
    const consent = tab.getByRole("button", { name: "Continue" });
    const signedIn = tab.getByRole("button", { name: "Sign out (carol)" });
    await consent.or(signedIn).first().waitFor();
    if ((await consent.count()) > 0) await consent.click();
    await signedIn.waitFor();
    await tab.close();
  });
});
