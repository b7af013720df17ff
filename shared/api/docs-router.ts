import { Hono } from "hono";
import { html } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import { DOCS_PATH } from "../console/config.js";

/**
 * `/docs`: the API reference as one HTML page rendered on the server from the
 * same OpenAPI document `/openapi.json` serves, so it cannot drift from the
 * API. No script, no font, no stylesheet from anywhere: a style element and
 * links within the page.
 */
export function docsRouter(document: () => unknown): Hono {
  const app = new Hono();
  let page: string | undefined;
  app.get(DOCS_PATH, async (c) => {
    page ??= String(await renderReference(asDocument(document())));
    c.header(
      "Content-Security-Policy",
      "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    );
    c.header("X-Content-Type-Options", "nosniff");
    return c.html(page);
  });
  return app;
}

type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

interface Schema {
  readonly $ref?: string;
  readonly type?: string;
  readonly format?: string;
  readonly description?: string;
  readonly enum?: readonly unknown[];
  readonly items?: Schema;
  readonly properties?: Readonly<Record<string, Schema>>;
  readonly required?: readonly string[];
  readonly additionalProperties?: Schema | boolean;
  readonly anyOf?: readonly Schema[];
  readonly oneOf?: readonly Schema[];
  readonly nullable?: boolean;
  readonly minimum?: number;
  readonly maximum?: number;
  readonly maxLength?: number;
  readonly pattern?: string;
  readonly default?: unknown;
  readonly example?: unknown;
}

interface Parameter {
  readonly name: string;
  readonly in: string;
  readonly required?: boolean;
  readonly description?: string;
  readonly schema?: Schema;
}

interface Content {
  readonly content?: Readonly<Record<string, { readonly schema?: Schema }>>;
  readonly description?: string;
  /** A response's headers a client acts on (ETag, Location, Retry-After). */
  readonly headers?: Readonly<Record<string, { readonly description?: string }>>;
}

interface Operation {
  readonly operationId?: string;
  readonly summary?: string;
  readonly description?: string;
  readonly tags?: readonly string[];
  readonly security?: readonly Readonly<Record<string, unknown>>[];
  readonly parameters?: readonly Parameter[];
  readonly requestBody?: Content & { readonly required?: boolean };
  readonly responses?: Readonly<Record<string, Content>>;
}

interface OpenApiDocument {
  readonly info: {
    readonly title: string;
    readonly version: string;
    readonly description?: string;
  };
  readonly paths: Readonly<Record<string, Readonly<Record<string, Operation>>>>;
  readonly components?: {
    readonly schemas?: Readonly<Record<string, Schema>>;
    readonly securitySchemes?: Readonly<Record<string, { readonly description?: string }>>;
  };
}

function asDocument(value: unknown): OpenApiDocument {
  const doc = value as Partial<OpenApiDocument> | null;
  if (doc === null || typeof doc !== "object" || !doc.info || !doc.paths) {
    throw new Error("the OpenAPI document has no info or paths");
  }
  return doc as OpenApiDocument;
}

const METHODS = ["get", "post", "put", "patch", "delete"] as const;

const refName = (ref: string) => ref.slice(ref.lastIndexOf("/") + 1);
const schemaAnchor = (name: string) => `schema-${name}`;

/** A schema in one line: a link for a named schema, else its type and constraints. */
function typeOf(schema: Schema | undefined): Html {
  if (schema === undefined) return html`any`;
  if (schema.$ref !== undefined) {
    const name = refName(schema.$ref);
    return html`<a href="#${schemaAnchor(name)}">${name}</a>`;
  }
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) {
    return html`${alternatives.map((s, i) => html`${i > 0 ? " | " : ""}${typeOf(s)}`)}`;
  }
  const nullable = schema.nullable ? " | null" : "";
  if (schema.enum) {
    return html`${schema.enum.map((v, i) => html`${i > 0 ? " | " : ""}<code>${JSON.stringify(v)}</code>`)}${nullable}`;
  }
  if (schema.type === "array") return html`array of ${typeOf(schema.items)}${nullable}`;
  if (schema.type === "object" && schema.properties === undefined) {
    const values = schema.additionalProperties;
    return typeof values === "object"
      ? html`map of string → ${typeOf(values)}${nullable}`
      : html`object${nullable}`;
  }
  const limits = [
    schema.format,
    schema.minimum !== undefined ? `≥ ${schema.minimum}` : undefined,
    schema.maximum !== undefined ? `≤ ${schema.maximum}` : undefined,
    schema.maxLength !== undefined ? `≤ ${schema.maxLength} chars` : undefined,
  ].filter((part) => part !== undefined);
  return html`${schema.type ?? "any"}${nullable}${limits.length > 0 ? ` (${limits.join(", ")})` : ""}`;
}

function propertiesTable(schema: Schema): Html {
  const required = new Set(schema.required ?? []);
  const rows = Object.entries(schema.properties ?? {});
  return html`<table>
    <thead><tr><th scope="col">Field</th><th scope="col">Type</th><th scope="col">Description</th></tr></thead>
    <tbody>
      ${rows.map(
        ([name, property]) => html`<tr>
          <td><code>${name}</code>${required.has(name) ? html` <span class="req">required</span>` : ""}</td>
          <td>${typeOf(property)}</td>
          <td>${property.description ?? ""}${
            property.type === "object" && property.properties
              ? html`<details><summary>fields</summary>${propertiesTable(property)}</details>`
              : ""
          }</td>
        </tr>`,
      )}
    </tbody>
  </table>`;
}

function schemaBlock(schema: Schema | undefined): Html {
  if (schema === undefined) return html``;
  if (schema.properties) return propertiesTable(schema);
  return html`<p>${typeOf(schema)}</p>`;
}

function operationBlock(method: string, path: string, op: Operation): Html {
  const id = op.operationId ?? `${method}-${path}`;
  const params = op.parameters ?? [];
  const body = op.requestBody?.content?.["application/json"]?.schema;
  const open = (op.security ?? []).some((s) => Object.keys(s).length === 0) || !op.security;
  return html`<section class="op" id="${id}" aria-labelledby="${id}-title">
    <h3 id="${id}-title"><span class="method ${method}">${method.toUpperCase()}</span> <code>${path}</code></h3>
    <p>${op.summary ?? ""}</p>
    ${op.description ? html`<p>${op.description}</p>` : ""}
    ${open ? html`<p class="note">No credentials needed.</p>` : ""}
    ${
      params.length > 0
        ? html`<h4>Parameters</h4><table>
          <thead><tr><th scope="col">Name</th><th scope="col">In</th><th scope="col">Type</th><th scope="col">Description</th></tr></thead>
          <tbody>${params.map(
            (
              p,
            ) => html`<tr><td><code>${p.name}</code>${p.required ? html` <span class="req">required</span>` : ""}</td>
              <td>${p.in}</td><td>${typeOf(p.schema)}</td><td>${p.description ?? p.schema?.description ?? ""}</td></tr>`,
          )}</tbody></table>`
        : ""
    }
    ${body ? html`<h4>Request body (application/json)</h4>${schemaBlock(body)}` : ""}
    <h4>Responses</h4>
    <table>
      <thead><tr><th scope="col">Status</th><th scope="col">Description</th><th scope="col">Body</th></tr></thead>
      <tbody>${Object.entries(op.responses ?? {}).map(
        ([
          status,
          response,
        ]) => html`<tr><td>${status}</td><td>${response.description ?? ""}${Object.entries(
          response.headers ?? {},
        ).map(
          ([name, header]) => html`<br>Header <code>${name}</code>: ${header.description ?? ""}`,
        )}</td>
          <td>${typeOf(response.content?.["application/json"]?.schema)}</td></tr>`,
      )}</tbody>
    </table>
  </section>`;
}

function renderReference(doc: OpenApiDocument): Html {
  const operations = Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.flatMap((method) => {
      const op = item[method];
      return op ? [{ method, path, op, tag: op.tags?.[0] ?? "other" }] : [];
    }),
  );
  const tags = [...new Set(operations.map((o) => o.tag))];
  const schemas = Object.entries(doc.components?.schemas ?? {}).sort(([a], [b]) =>
    a.localeCompare(b),
  );
  const security = Object.entries(doc.components?.securitySchemes ?? {});
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" />
<title>${doc.info.title} reference</title>
<style>
  body { font: 15px/1.5 system-ui, sans-serif; margin: 0; color: #1b1f24; }
  header, main, nav { max-width: 70rem; margin: 0 auto; padding: 0 1rem; }
  nav ul { columns: 2; }
  table { border-collapse: collapse; width: 100%; margin: .5rem 0 1rem; }
  th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
  th { background: #f3f5f7; }
  code { font: 13px ui-monospace, monospace; }
  .op { border-top: 2px solid #d0d7de; padding-top: .5rem; }
  .method { display: inline-block; min-width: 4.5em; padding: 0 .3em; border-radius: 4px; color: #fff; background: #57606a; font-size: 13px; text-align: center; }
  .method.get { background: #0a6b3d; } .method.post { background: #0b4fa8; } .method.patch { background: #8a4b00; } .method.delete { background: #a40e26; }
  .req { color: #a40e26; font-size: 12px; }
  .note { color: #57606a; }
  a { color: #0b4fa8; }
  :focus-visible { outline: 3px solid #0b4fa8; outline-offset: 2px; }
</style>
</head>
<body>
<header>
  <h1>${doc.info.title} <small>${doc.info.version}</small></h1>
  <p>${doc.info.description ?? ""}</p>
  <p>Rendered from <a href="/openapi.json">/openapi.json</a>. The web console is at <a href="/console">/console</a>.</p>
</header>
<nav aria-label="Operations">
  <h2>Operations</h2>
  ${tags.map(
    (tag) =>
      html`<h3>${tag}</h3><ul>${operations
        .filter((o) => o.tag === tag)
        .map(
          (o) =>
            html`<li><a href="#${o.op.operationId ?? `${o.method}-${o.path}`}">${o.method.toUpperCase()} ${o.path}</a>: ${o.op.summary ?? ""}</li>`,
        )}</ul>`,
  )}
</nav>
<main>
  <h2>Authentication</h2>
  <ul>${security.map(([name, scheme]) => html`<li><strong>${name}</strong>: ${scheme.description ?? ""}</li>`)}</ul>
  ${tags.map(
    (tag) =>
      html`<h2>${tag}</h2>${operations
        .filter((o) => o.tag === tag)
        .map((o) => operationBlock(o.method, o.path, o.op))}`,
  )}
  <h2>Schemas</h2>
  ${schemas.map(
    ([
      name,
      schema,
    ]) => html`<section id="${schemaAnchor(name)}" aria-labelledby="${schemaAnchor(name)}-title">
      <h3 id="${schemaAnchor(name)}-title">${name}</h3>
      ${schema.description ? html`<p>${schema.description}</p>` : ""}
      ${schemaBlock(schema)}
      ${schema.example !== undefined ? html`<p>Example:</p><pre><code>${JSON.stringify(schema.example, null, 2)}</code></pre>` : ""}
    </section>`,
  )}
</main>
</body>
</html>`;
}
