import { readFileSync } from "node:fs";
import { join } from "node:path";
import { App } from "aws-cdk-lib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  environmentBytes,
  LAMBDA_ENVIRONMENT_LIMIT_BYTES,
} from "../../infra/lambda-environment.js";
import {
  apiFunctionEnvironment,
  resolveSettings,
  settingsFromContext,
} from "../../infra/settings.js";
import { REPO_ROOT } from "./support/repo-root.js";
import { propertiesOf, type Synthesized, synthesizeVariants } from "./support/synth.js";
import { isObject, type Json, referencedId } from "./support/template-json.js";

/**
 * Lambda refuses a function whose environment variables, together, pass 4 KB ("Lambda was unable
 * to configure your environment variables because the environment variables you have provided
 * exceeded the 4KB limit"): CreateFunction/UpdateFunctionConfiguration fail and the deploy rolls
 * back. docs/deploy.md promises that a setting the deployment cannot take stops the synth with a
 * message naming it. adminTenants (each id up to 256 characters, any number of them), jwtIssuer,
 * consoleClientId and consoleScope all go into the API function's environment, so synth counts it.
 */

const fromContext = (context: Record<string, string>) =>
  settingsFromContext(new App({ context }).node);

/** The synth's refusal, or null when it takes the context. */
function refusalOf(context: Record<string, string>): string | null {
  try {
    fromContext(context);
    return null;
  } catch (error) {
    return String(error);
  }
}

/**
 * A lower bound on a variable's deployed length: a Ref to a table or queue becomes a name (or a
 * queue URL) that holds the logical id and more, so the logical id's length undercounts it.
 */
function lowerBoundLength(value: Json): number {
  if (typeof value === "string") return Buffer.byteLength(value);
  if (isObject(value) && typeof value.Ref === "string") return value.Ref.length;
  return 0;
}

/**
 * Sixty operator roles' ARNs, as docs/deploy.md says to give them (the role ARN without its path):
 * each valid, together 3,409 characters.
 */
const OPERATOR_ROLES = Array.from(
  { length: 60 },
  (_, i) => `arn:aws:iam::1234567890${String(i).padStart(2, "0")}:role/SchedulerOperators-Team${i}`,
).join(",");

const JWT = {
  jwtIssuer: "https://id.example.com/realms/scheduler",
  jwtAudience: "scheduler-api",
  consoleClientId: "scheduler-console",
  consoleScope: "openid profile",
};

let synth: Readonly<Record<"iam" | "jwt", Synthesized>>;
let dispose = () => {};
beforeAll(() => {
  ({ variants: synth, dispose } = synthesizeVariants({
    iam: { stage: "prod", adminTenants: "arn:aws:iam::123456789012:role/Ops" },
    jwt: { stage: "prod", adminTenants: "ops-team", ...JWT },
  }));
});
afterAll(() => dispose());

function apiVariables(variant: Synthesized): Readonly<Record<string, Json>> {
  const environment = propertiesOf(variant, variant.stack.api.handler.fn).Environment;
  return isObject(environment) && isObject(environment.Variables) ? environment.Variables : {};
}

describe("the API function's environment against Lambda's 4 KB limit", () => {
  it("is refused at synth past it, naming adminTenants and the limit", () => {
    const refusal = refusalOf({ stage: "prod", adminTenants: OPERATOR_ROLES });
    expect(refusal).toMatch(/adminTenants 3409, metricsNamespace 14 bytes here/);
    expect(refusal).toMatch(/past Lambda's limit of 4096/);
  });

  it.each(["iam", "jwt"] as const)(
    "is counted with every variable the %s stack gives the function, the table names and queue URLs at their longest",
    (variant) => {
      const stack = synth[variant];
      const s = stack.stack.settings;
      const counted = apiFunctionEnvironment(s);
      const deployed = apiVariables(stack);
      expect(Object.keys(counted).sort()).toEqual(Object.keys(deployed).sort());
      for (const [key, value] of Object.entries(deployed)) {
        const id = referencedId(value);
        if (id === null) {
          expect(counted[key], key).toBe(value);
          continue;
        }
        // A token: counted at the longest its resource's name or URL can be.
        const type = stack.resources[id]?.Type;
        const mostBytes =
          type === "AWS::DynamoDB::Table" ? 255 : type === "AWS::SQS::Queue" ? 171 : 0;
        expect(counted[key], key).toEqual({ mostBytes });
      }
      // At least what the deployed variables' keys and values take.
      const lowerBound = Object.entries(deployed).reduce(
        (n, [key, value]) => n + Buffer.byteLength(key) + lowerBoundLength(value),
        0,
      );
      expect(environmentBytes(counted)).toBeGreaterThan(lowerBound);
    },
  );

  it("takes admin tenants up to the limit, and refuses one byte more", () => {
    const base = resolveSettings({ stage: "prod" });
    const bytesWith = (adminTenants: string[]) => {
      const s = { ...base, adminTenants };
      return environmentBytes(apiFunctionEnvironment(s));
    };
    const room = LAMBDA_ENVIRONMENT_LIMIT_BYTES - bytesWith([]);
    // Tenant ids of 200 characters and one shorter, joined by commas, fill the room exactly.
    const ids = Array.from({ length: Math.floor(room / 201) }, (_, i) => `t${i}`.padEnd(200, "x"));
    const rest = room - ids.length * 201;
    const fitting = [...ids, "r".repeat(rest)].join(",");
    expect(bytesWith(fitting.split(","))).toBe(LAMBDA_ENVIRONMENT_LIMIT_BYTES);
    expect(fromContext({ stage: "prod", adminTenants: fitting }).adminTenants).toHaveLength(
      ids.length + 1,
    );
    expect(refusalOf({ stage: "prod", adminTenants: `${fitting}r` })).toMatch(
      /make the API function's environment up to 4097 bytes, past Lambda's limit of 4096/,
    );
  });

  it("leaves adminTenants, jwtIssuer, consoleClientId and consoleScope the room docs/deploy.md gives them, in any stage", () => {
    const deploy = readFileSync(join(REPO_ROOT, "docs", "deploy.md"), "utf8").replace(/\s+/g, " ");
    const stated = /share ([\d,]+) bytes of the API function's environment/.exec(deploy)?.[1];
    expect(stated).toBeDefined();
    // The longest stage (20 characters) in the default namespace, a JWT authorizer, all four empty.
    const s = resolveSettings({ stage: "s".repeat(20) });
    const emptyJwt = {
      ...s,
      auth: {
        kind: "jwt",
        issuer: "",
        audience: [],
        consoleClientId: "",
        consoleScope: "",
        scopes: [],
      },
    } as const;
    const bytes = environmentBytes(apiFunctionEnvironment(emptyJwt));
    expect(LAMBDA_ENVIRONMENT_LIMIT_BYTES - bytes).toBeGreaterThanOrEqual(
      Number(stated?.replaceAll(",", "")),
    );
  });
});
