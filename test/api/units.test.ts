import { describe, expect, it } from "vitest";
import {
  adminTenantsFrom,
  bearerAuthenticator,
  DEV_API_KEY,
  defaultTenantOfPrincipal,
  iamAuthenticator,
  isValidTenantId,
  jwtAuthenticator,
  localApiKeys,
  localAuthNotice,
} from "../../shared/api/auth.js";
import { ApiError } from "../../shared/api/errors.js";
import { displayZoneOf, previewOf } from "../../shared/api/preview.js";
import { parseIfMatch } from "../../shared/api/requests.js";
import { ValidationError } from "../../shared/validation.js";

describe("previewOf (fixed clock)", () => {
  const berlin = { cron: "30 2 * * *", timezone: "Europe/Berlin" };

  it("spring forward: the skipped 02:30 runs once at 03:30 CEST, later days at 02:30", () => {
    const preview = previewOf(berlin, "Europe/Berlin", new Date("2031-03-29T12:00:00Z"), 3);
    expect(preview.occurrences).toEqual([
      { utc: "2031-03-30T01:30:00.000Z", local: "2031-03-30T03:30:00.000+02:00" },
      { utc: "2031-03-31T00:30:00.000Z", local: "2031-03-31T02:30:00.000+02:00" },
      { utc: "2031-04-01T00:30:00.000Z", local: "2031-04-01T02:30:00.000+02:00" },
    ]);
  });

  it("fall back: a repeated 02:30 runs once, the first time", () => {
    const preview = previewOf(berlin, "Europe/Berlin", new Date("2031-10-25T12:00:00Z"), 2);
    expect(preview.occurrences).toEqual([
      { utc: "2031-10-26T00:30:00.000Z", local: "2031-10-26T02:30:00.000+02:00" },
      { utc: "2031-10-27T01:30:00.000Z", local: "2031-10-27T02:30:00.000+01:00" },
    ]);
  });

  it("counts from now truncated to the second, and stops at year 9999", () => {
    const every = { every: "PT1S", startAt: "2030-01-01T00:00:00.000Z" };
    const at = previewOf(every, "UTC", new Date("2030-01-01T00:00:05.700Z"), 2);
    expect(at.occurrences.map((o) => o.utc)).toEqual([
      "2030-01-01T00:00:05.000Z",
      "2030-01-01T00:00:06.000Z",
    ]);
    const end = previewOf(
      { every: "P1D", startAt: "9999-12-30T00:00:00.000Z" },
      "UTC",
      new Date("9999-12-29T00:00:00Z"),
      5,
    );
    expect(end.occurrences).toHaveLength(2);
  });

  it("shows runAt and startAt in the offset they were written with", () => {
    expect(displayZoneOf({ runAt: "2030-01-01T09:00:00+0530" })).toBe("+05:30");
    expect(displayZoneOf({ runAt: "2030-01-01T09:00:00-05" })).toBe("-05:00");
    expect(displayZoneOf({ runAt: "2030-01-01T09:00:00Z" })).toBe("UTC");
    expect(displayZoneOf({ runAt: "2030-01-01T09:00:00+00:00" })).toBe("UTC");
    expect(displayZoneOf({ every: "PT1H" })).toBe("UTC");
    expect(displayZoneOf({ every: "PT1H", startAt: "2030-01-01T09:00:00.5-03:30" })).toBe("-03:30");
    const preview = previewOf(
      { runAt: "2030-01-01T03:30:00.000Z" },
      "+05:30",
      new Date("2029-01-01T00:00:00Z"),
      5,
    );
    expect(preview.occurrences).toEqual([
      { utc: "2030-01-01T03:30:00.000Z", local: "2030-01-01T09:00:00.000+05:30" },
    ]);
  });
});

describe("local API keys", () => {
  it("parses key=tenant pairs", () => {
    const { keys, usingDevKey } = localApiKeys({
      SCHEDULER_API_KEYS: " k1=tenantA , k2=arn:aws:iam::1:role/x",
    });
    expect(usingDevKey).toBe(false);
    expect([...keys]).toEqual([
      ["k1", "tenantA"],
      ["k2", "arn:aws:iam::1:role/x"],
    ]);
    expect(localAuthNotice({ SCHEDULER_API_KEYS: "k1=a" })).toBeNull();
  });

  it("falls back to local-dev-key for tenant default, and says so", () => {
    for (const env of [{}, { SCHEDULER_API_KEYS: "" }, { SCHEDULER_API_KEYS: "  " }]) {
      expect(localApiKeys(env)).toEqual({
        keys: new Map([[DEV_API_KEY, "default"]]),
        usingDevKey: true,
      });
      expect(localAuthNotice(env)).toContain(
        '"Authorization: Bearer local-dev-key" for tenant "default"',
      );
    }
  });

  it.each(["k1", "=t", "k1=", "k1=a#b", "k 1=t", "k1=a,k1=b", "k1=.", "k1=.."])(
    "refuses %j",
    (value) => {
      expect(() => localApiKeys({ SCHEDULER_API_KEYS: value })).toThrow(/SCHEDULER_API_KEYS/);
    },
  );

  it("refuses a key holding '=' (base64 padding) instead of cutting the key there and mapping its start to a tenant named '=…'", () => {
    expect(() => localApiKeys({ SCHEDULER_API_KEYS: "dGVzdA===tenantA" })).toThrow(
      /entry 1 .*key: visible ASCII without spaces or '='/,
    );
  });

  it("a refusal names the entry by its place and never prints a key: the sandbox's stderr and a CI log are no place for it", () => {
    const refusal = (value: string) => {
      try {
        localApiKeys({ SCHEDULER_API_KEYS: value });
      } catch (error) {
        return error instanceof Error ? error.message : String(error);
      }
      throw new Error(`${value} was accepted`);
    };
    const badTenant = refusal("ok-key=a, sk_live_s3cret=tenant#b");
    expect(badTenant).toContain("entry 2");
    expect(badTenant).toContain('"tenant#b"');
    const noTenant = refusal("sk_live_s3cret");
    expect(noTenant).toContain("entry 1");
    const twice = refusal("sk_live_s3cret=a, other=b, sk_live_s3cret=c");
    expect(twice).toMatch(/entries 1 and 3/);
    for (const message of [badTenant, noTenant, twice]) expect(message).not.toContain("s3cret");
  });

  it("reads ADMIN_TENANTS as comma-separated tenant ids", () => {
    expect(adminTenantsFrom({ ADMIN_TENANTS: " ops , arn:aws:iam::1:role/x,," })).toEqual([
      "ops",
      "arn:aws:iam::1:role/x",
    ]);
    expect(adminTenantsFrom({})).toEqual([]);
  });

  // An entry no authenticator can name would make an admin of no one, without a word.
  it.each(["ops,bad tenant", "a#b", "x".repeat(257), "ops,..", "."])(
    "refuses ADMIN_TENANTS %j",
    (value) => {
      expect(() => adminTenantsFrom({ ADMIN_TENANTS: value })).toThrow(
        /ADMIN_TENANTS: ".*" is not a tenant id/,
      );
    },
  );

  it("bearer authenticator maps exactly the configured keys", async () => {
    const auth = bearerAuthenticator(new Map([["secret", "t1"]]));
    const ask = (value: string | undefined) => auth({ header: () => value, env: {} });
    expect(await ask("Bearer secret")).toBe("t1");
    expect(await ask("bearer secret")).toBe("t1");
    for (const value of [
      undefined,
      "",
      "Bearer",
      "Bearer secre",
      "Bearer secrett",
      "Basic secret",
      "Bearer a b",
    ]) {
      expect(await ask(value)).toBeNull();
    }
  });
});

describe("IAM principal → tenant", () => {
  it("maps an assumed-role session to its role, users to themselves", () => {
    const of = (userArn: string) =>
      defaultTenantOfPrincipal({ userArn, accountId: "123456789012" });
    expect(of("arn:aws:sts::123456789012:assumed-role/Reporter/i-0abc")).toBe(
      "arn:aws:iam::123456789012:role/Reporter",
    );
    // The session name is the caller's to choose (letters, digits and _+=,.@-): it names no tenant.
    for (const session of ["alice@example.com", "role=Admin,x.y", "Admin"]) {
      expect(of(`arn:aws:sts::123456789012:assumed-role/Reporter/${session}`)).toBe(
        "arn:aws:iam::123456789012:role/Reporter",
      );
    }
    // A role's path is not in its sessions' ARN: an Identity Center role is role/<name>.
    expect(of("arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Ops_0a1b/jane")).toBe(
      "arn:aws:iam::123456789012:role/AWSReservedSSO_Ops_0a1b",
    );
    expect(of("arn:aws:sts::210987654321:assumed-role/Reporter/i-0abc")).toBe(
      "arn:aws:iam::210987654321:role/Reporter",
    );
    expect(of("arn:aws-us-gov:sts::123456789012:assumed-role/Reporter/s")).toBe(
      "arn:aws-us-gov:iam::123456789012:role/Reporter",
    );
    expect(of("arn:aws:iam::123456789012:user/ops/alice")).toBe(
      "arn:aws:iam::123456789012:user/ops/alice",
    );
    expect(of("not-an-arn")).toBeNull();
  });

  it("refuses a federated user: its name is its caller's to choose, so it names no tenant", () => {
    const of = (userArn: string) =>
      defaultTenantOfPrincipal({ userArn, accountId: "123456789012" });
    // GetFederationToken takes any name: every IAM user allowed to call it (and the API) could
    // act as the tenant of a federated user some other caller, a broker, named so.
    for (const arn of [
      "arn:aws:sts::123456789012:federated-user/bob",
      "arn:aws-us-gov:sts::123456789012:federated-user/customer-42",
    ]) {
      expect(of(arn), arn).toBeNull();
    }
    // Nor any other STS principal the default does not know how to name (not an assumed role).
    expect(of("arn:aws:sts::123456789012:something-else/x")).toBeNull();
    expect(of("arn:aws:iam::123456789012:root")).toBe("arn:aws:iam::123456789012:root");
  });

  it("names users under any path, other partitions too, but only a valid tenant id passes (the app's 401 else)", () => {
    const of = (userArn: string) =>
      defaultTenantOfPrincipal({ userArn, accountId: "123456789012" });
    for (const arn of [
      "arn:aws-cn:iam::123456789012:root",
      "arn:aws-cn:sts::123456789012:assumed-role/Reporter/s",
      "arn:aws-us-gov:iam::123456789012:user/alice",
    ]) {
      const tenant = of(arn);
      expect(tenant !== null && isValidTenantId(tenant), arn).toBe(true);
    }
    // An IAM path takes any printable ASCII and up to 512 characters; a tenant id does not, so
    // such a user is refused by app.ts's isValidTenantId (docs/api.md, Authentication and tenants).
    for (const arn of [
      "arn:aws:iam::123456789012:user/!ops#1/alice",
      `arn:aws:iam::123456789012:user/${"team/".repeat(50)}alice`,
    ]) {
      const tenant = of(arn);
      expect(tenant, arn).toBe(arn);
      expect(isValidTenantId(tenant ?? ""), arn).toBe(false);
    }
  });

  it("reads requestContext.authorizer.iam from the Lambda adapter's env, through the hook", async () => {
    const env = {
      requestContext: {
        authorizer: { iam: { userArn: "arn:aws:iam::1:user/bob", accountId: "1" } },
      },
    };
    expect(await iamAuthenticator()({ header: () => undefined, env })).toBe(
      "arn:aws:iam::1:user/bob",
    );
    const custom = iamAuthenticator((p) => (p.accountId === "1" ? "team-one" : null));
    expect(await custom({ header: () => undefined, env })).toBe("team-one");
    for (const other of [
      {},
      null,
      { requestContext: {} },
      { requestContext: { authorizer: { iam: {} } } },
    ]) {
      expect(await iamAuthenticator()({ header: () => undefined, env: other })).toBeNull();
    }
  });
});

describe("JWT claims → tenant", () => {
  const authenticate = jwtAuthenticator();
  const request = (claims: unknown) => ({
    env: { requestContext: { authorizer: { jwt: { claims, scopes: null } } } },
    header: () => undefined,
  });

  it("takes the tenant_id claim, else the subject namespaced as sub:<sub>", async () => {
    expect(await authenticate(request({ sub: "client-1", tenant_id: "acme" }))).toBe("acme");
    expect(await authenticate(request({ sub: "client-1" }))).toBe("sub:client-1");
  });

  it("takes the subjects identity providers issue: Auth0's provider|id included", async () => {
    for (const sub of [
      "auth0|5f7c8ec7c33c6c004bbafe82",
      "google-oauth2|104650892746893471243",
      "samlp|corp|jane@example.com",
      "repo:octo-org/octo-repo:ref:refs/heads/main",
      "9f6b2c1e-8f0a-4e8e-b1a3-2f7d8c9e0a1b",
    ]) {
      expect(await authenticate(request({ sub }))).toBe(`sub:${sub}`);
    }
    expect(await authenticate(request({ sub: "x", tenant_id: "acme|eu" }))).toBe("acme|eu");
  });

  it("a token without tenant_id whose sub is another tenant's id does not act as that tenant", async () => {
    const victim = await authenticate(request({ sub: "client-9", tenant_id: "acme" }));
    const attacker = await authenticate(request({ sub: "acme" }));
    expect(victim).toBe("acme");
    expect(attacker).toBe("sub:acme");
    expect(attacker).not.toBe(victim);
    // Nor can a tenant_id claim name a subject's tenant.
    expect(await authenticate(request({ sub: "x", tenant_id: "sub:client-1" }))).toBeNull();
    // A tenant_id claim that is present but unusable is refused, not replaced by the subject.
    expect(await authenticate(request({ sub: "client-1", tenant_id: 7 }))).toBeNull();
    expect(await authenticate(request({ sub: "client-1", tenant_id: "" }))).toBeNull();
  });

  it("refuses a tenant_id or sub of null, true or false: API Gateway hands a JSON null, true or false over as that text, so every such token would share one tenant", async () => {
    for (const text of ["null", "true", "false"]) {
      expect(await authenticate(request({ sub: "client-1", tenant_id: text }))).toBeNull();
      expect(await authenticate(request({ sub: text }))).toBeNull();
    }
    // JSON's literals are lowercase only: no non-string claim becomes these, so they are ids.
    expect(await authenticate(request({ sub: "client-1", tenant_id: "Null" }))).toBe("Null");
    expect(await authenticate(request({ sub: "TRUE" }))).toBe("sub:TRUE");
    // A number arrives as its digits and acts as the tenant of the string.
    expect(await authenticate(request({ sub: "client-1", tenant_id: "7" }))).toBe("7");
  });

  it("refuses a tenant_id of . or ..: a URL resolves the dot segment, so no admin could name it in /tenants/{tenantId}/quotas", async () => {
    for (const tenant_id of [".", ".."]) {
      expect(await authenticate(request({ sub: "client-1", tenant_id }))).toBeNull();
      expect(isValidTenantId(tenant_id)).toBe(false);
    }
    // Dots elsewhere are an id's own: only the two dot segments are refused.
    for (const tenant_id of ["...", ".acme", "acme.", "a..b"]) {
      expect(await authenticate(request({ sub: "client-1", tenant_id }))).toBe(tenant_id);
    }
  });

  it("refuses a request without claims, or with a tenant the keys could not hold", async () => {
    expect(await authenticate({ env: { requestContext: {} }, header: () => undefined })).toBeNull();
    expect(await authenticate(request({ sub: "has#hash" }))).toBeNull();
    expect(await authenticate(request({ sub: 42 }))).toBeNull();
    expect(await authenticate(request({ sub: "" }))).toBeNull();
    expect(await authenticate(request({ sub: "x".repeat(253) }))).toBeNull();
  });
});

describe("If-Match", () => {
  it.each([
    ['"3"', 3],
    ['W/"12"', 12],
    ["7", 7],
    [' "1" ', 1],
  ])("%j → %i", (header, version) => {
    expect(parseIfMatch(header)).toBe(version);
  });

  it("428 when absent, 400 when unreadable", () => {
    expect(() => parseIfMatch(undefined)).toThrow(ApiError);
    expect(() => parseIfMatch("")).toThrow(ApiError);
    for (const header of ["*", '"0"', '"abc"', '"1", "2"', "-1", "1e3", '"9999999999999999"']) {
      expect(() => parseIfMatch(header)).toThrow(ValidationError);
    }
  });
});
