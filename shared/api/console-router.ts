import { type Context, Hono } from "hono";
import { html, raw } from "hono/html";
import type { ConsoleAssets, ConsoleFile } from "../console/assets.js";
import { CONSOLE_PATH, type ConsoleConfig } from "../console/config.js";
import { type ConsolePolicyDeps, consolePolicy } from "./console-policy.js";

export interface ConsoleOptions {
  /** The browser bundle; null answers the console's pages with 503 saying it was not built. */
  readonly assets: ConsoleAssets | null;
  readonly config: ConsoleConfig;
}

/** `/console` and everything under it is public: the page holds no data until the user signs in. */
export function isConsolePath(path: string): boolean {
  return path === CONSOLE_PATH || path.startsWith(`${CONSOLE_PATH}/`);
}

/**
 * The web console: one page (every path under /console, so a reload or a
 * shared link of /console/jobs/<id> works) that loads the bundle, which then
 * calls the JSON API with the user's bearer key or access token.
 */
export function consoleRouter(options: ConsoleOptions, deps: ConsolePolicyDeps): Hono {
  const app = new Hono();
  const { assets, config } = options;
  const policy = consolePolicy(config.auth, deps);

  app.get(`${CONSOLE_PATH}/assets/:file`, (c: Context) => {
    const file = assets?.files.get(c.req.param("file") as ConsoleFile);
    if (!file) return c.text("no such file", 404);
    // A page asks for its own build (?v=<version>), so a cached file is never the wrong one.
    const immutable = c.req.query("v") === assets?.version;
    c.header("Cache-Control", immutable ? "public, max-age=31536000, immutable" : "no-cache");
    c.header("X-Content-Type-Options", "nosniff");
    return c.body(file.body, 200, { "Content-Type": file.contentType });
  });

  const page = async (c: Context) => {
    c.header("Content-Security-Policy", await policy());
    c.header("Cache-Control", "no-cache");
    c.header("X-Content-Type-Options", "nosniff");
    c.header("Referrer-Policy", "no-referrer");
    // A page that opened the console (window.open, a link with target=_blank and an opener) keeps
    // no handle to its tab, so it cannot later send that tab to a look-alike sign-in. same-origin,
    // not same-origin-allow-popups: the OIDC sign-in navigates the tab itself and opens no popup.
    c.header("Cross-Origin-Opener-Policy", "same-origin");
    if (assets === null) {
      return c.text(
        "The console was not built into this bundle (infra/constructs/api.ts builds it at synth).",
        503,
      );
    }
    // JSON in a <script> ends at "</": escape "<" so no value can close the element.
    const configJson = JSON.stringify(config).replace(/</g, "\\u003c");
    return c.html(html`<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Scheduler console</title>
    <link rel="stylesheet" href="${CONSOLE_PATH}/assets/app.css?v=${assets.version}" />
    <script id="console-config" type="application/json">${raw(configJson)}</script>
    <script type="module" src="${CONSOLE_PATH}/assets/app.js?v=${assets.version}"></script>
  </head>
  <body>
    <div id="app"><p>Loading the console…</p></div>
    <noscript>The console needs JavaScript. The API reference at /docs does not.</noscript>
  </body>
</html>`);
  };
  app.get(CONSOLE_PATH, page);
  app.get(`${CONSOLE_PATH}/*`, page);
  return app;
}
