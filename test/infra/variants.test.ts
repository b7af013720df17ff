import { Validations } from "aws-cdk-lib";
import { Annotations, Match } from "aws-cdk-lib/assertions";
import { Queue, QueueEncryption } from "aws-cdk-lib/aws-sqs";
import { AwsSolutionsChecks } from "cdk-nag";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildSchedulerApp } from "../../infra/build-app.js";
import { ENV } from "../../shared/config.js";
import { parseConsoleAuth } from "../../shared/console/config.js";
import { COMPONENTS, grantsOfRole, roleOfComponent } from "./support/iam-policy.js";
import {
  logicalIdOf,
  propertiesOf,
  resourcesOfType,
  type Synthesized,
  synthesizeUnbundled,
  synthesizeVariants,
} from "./support/synth.js";
import { asArray, isObject, referencedId } from "./support/template-json.js";

const TOPIC_ARN = "arn:aws:sns:eu-west-1:123456789012:ops-alarms";

let variants: Readonly<Record<"dev" | "jwt" | "topic", Synthesized>>;
let dispose = () => {};

beforeAll(() => {
  const synthesized = synthesizeVariants({
    dev: { stage: "dev" },
    jwt: {
      stage: "prod",
      jwtIssuer: "https://issuer.example.com/",
      jwtAudience: "scheduler-api, scheduler-cli",
      consoleClientId: "scheduler-console",
      jwtScopes: "scheduler/api scheduler/admin",
      tracing: "true",
      alarmEmail: "oncall@example.com",
    },
    topic: {
      stage: "staging",
      alarmTopicArn: TOPIC_ARN,
      demoJobTypes: "true",
      oneOffClaimWrites: "plain",
    },
  });
  variants = synthesized.variants;
  dispose = synthesized.dispose;
});

afterAll(() => dispose());

describe("cdk-nag AwsSolutions", () => {
  it.each(["dev", "jwt", "topic"] as const)(
    "finds nothing unacknowledged in the %s variant",
    (name) => {
      const report = new AwsSolutionsChecks().validateScope(variants[name].app);
      const findings = report.violations.map(
        (v) =>
          `${v.severity} ${v.ruleName}: ${v.description} at ${v.violatingResources.map((r) => r.constructPath).join(", ")}`,
      );
      expect(findings).toEqual([]);
    },
  );

  it("acknowledges only the reviewed rules, each with its reason in the code", () => {
    const acknowledged = new Map<string, Set<string>>();
    for (const construct of variants.jwt.app.node.findAll()) {
      for (const entry of construct.node.metadata) {
        if (entry.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY) continue;
        const data: unknown = entry.data;
        if (typeof data !== "object" || data === null) throw new Error("acknowledgement metadata");
        for (const [id, reason] of Object.entries(data)) {
          const rule = id.replace(/^annotation::/i, "");
          expect(typeof reason === "string" ? reason.length : 0, rule).toBeGreaterThan(60);
          const paths = acknowledged.get(rule) ?? new Set<string>();
          paths.add(construct.node.path.replace(/^Scheduler-prod\//, ""));
          acknowledged.set(rule, paths);
        }
      }
    }
    const functions = ["Api/Handler", "Dispatch/Tick", "Dispatch/Dispatcher", "Worker/Worker"];
    functions.push("Worker/DeadLetterConsumer");
    expect(
      Object.fromEntries([...acknowledged].map(([rule, paths]) => [rule, [...paths].sort()])),
    ).toEqual({
      // Runtime pinned to nodejs22.x by the design.
      "AwsSolutions-L1": functions.map((f) => `${f}/Function`).sort(),
      // X-Ray actions take no resource ARN (only with tracing on).
      "AwsSolutions-IAM5[Resource::*]": functions.map((f) => `${f}/Role`).sort(),
      // The async-failures queue is itself a dead-letter destination.
      "AwsSolutions-SQS3": ["Queues/AsyncFailures"],
      // The console's page and bundle, the API reference, the OpenAPI document and the health
      // check: public, holding no data; an async target's run routes: authorized by the run token.
      "AwsSolutions-APIG4": [
        "Api/HttpApi/GET--console",
        "Api/HttpApi/GET--console--{proxy+}",
        "Api/HttpApi/GET--docs",
        "Api/HttpApi/GET--health",
        "Api/HttpApi/GET--openapi.json",
        "Api/HttpApi/HEAD--console",
        "Api/HttpApi/HEAD--console--{proxy+}",
        "Api/HttpApi/HEAD--docs",
        "Api/HttpApi/HEAD--health",
        "Api/HttpApi/HEAD--openapi.json",
        "Api/HttpApi/POST--runs--{runId}--complete",
        "Api/HttpApi/POST--runs--{runId}--heartbeat",
      ],
    });
  });

  it("fails the synth of the app on an unacknowledged finding", () => {
    const { app, stack } = buildSchedulerApp({
      // No stack needs its assets bundled: the check is about the template only.
      context: { stage: "dev", "aws:cdk:bundling-stacks": [] },
      builtinCloudFormationValidation: false,
    });
    new Queue(stack, "Unencrypted", { encryption: QueueEncryption.UNENCRYPTED });
    expect(() => app.synth()).toThrow(/SQS Queue does not have server-side encryption/);
  });
});

describe("options", () => {
  const environmentOf = (
    synth: Synthesized,
    fnOf: (s: Synthesized["stack"]) => Parameters<typeof propertiesOf>[1],
  ) => {
    const fn = propertiesOf(synth, fnOf(synth.stack));
    return isObject(fn.Environment) && isObject(fn.Environment.Variables)
      ? fn.Environment.Variables
      : {};
  };
  const apiEnvironment = (synth: Synthesized) => environmentOf(synth, (s) => s.api.handler.fn);

  it("claims one-offs with a transaction unless oneOffClaimWrites is plain, in every function that claims", () => {
    // The dispatcher's passes and the API's fast path (and its resumes) claim; the tick and the
    // worker get the engine's settings alike.
    const claimers = [
      (s: Synthesized["stack"]) => s.dispatch.dispatcher.fn,
      (s: Synthesized["stack"]) => s.dispatch.tick.fn,
      (s: Synthesized["stack"]) => s.api.handler.fn,
      (s: Synthesized["stack"]) => s.worker.worker.fn,
    ];
    for (const fnOf of claimers) {
      expect(environmentOf(variants.dev, fnOf)[ENV.oneOffClaimWrites]).toBe("transaction");
      expect(environmentOf(variants.topic, fnOf)[ENV.oneOffClaimWrites]).toBe("plain");
    }
  });

  it("lets the API accept the demo job types only with demoJobTypes", () => {
    expect(apiEnvironment(variants.dev)[ENV.demoJobTypes]).toBe("false");
    expect(apiEnvironment(variants.jwt)[ENV.demoJobTypes]).toBe("false");
    expect(apiEnvironment(variants.topic)[ENV.demoJobTypes]).toBe("true");
    // Only the API decides: a worker runs whatever job it is given.
    const worker = propertiesOf(variants.topic, variants.topic.stack.worker.worker.fn);
    expect(JSON.stringify(worker.Environment)).not.toContain(ENV.demoJobTypes);
  });

  it("uses a JWT authorizer with the issuer and audiences from context", () => {
    const synth = variants.jwt;
    synth.template.hasResourceProperties("AWS::ApiGatewayV2::Authorizer", {
      AuthorizerType: "JWT",
      IdentitySource: ["$request.header.Authorization"],
      JwtConfiguration: {
        Issuer: "https://issuer.example.com/",
        Audience: ["scheduler-api", "scheduler-cli"],
      },
    });
    const open: string[] = [];
    for (const [, route] of resourcesOfType(synth, "AWS::ApiGatewayV2::Route")) {
      if (route.Properties?.AuthorizationType === "NONE") {
        open.push(String(route.Properties.RouteKey));
        // Scopes are for JWT routes alone: a public route takes no token to hold them.
        expect(route.Properties.AuthorizationScopes).toBeUndefined();
      } else {
        expect(route.Properties?.AuthorizationType).toBe("JWT");
        // jwtScopes: a token of the issuer for an audience (an ID token for the console's client,
        // say) is refused unless it carries one of them.
        expect(route.Properties?.AuthorizationScopes).toEqual(["scheduler/api", "scheduler/admin"]);
      }
    }
    // Only the console's page and bundle, the API reference, the OpenAPI document and the health
    // check; every API route needs a token, and an async target's run routes, which authenticate
    // by the run token in the function.
    expect(open.sort()).toEqual([
      "GET /console",
      "GET /console/{proxy+}",
      "GET /docs",
      "GET /health",
      "GET /openapi.json",
      "HEAD /console",
      "HEAD /console/{proxy+}",
      "HEAD /docs",
      "HEAD /health",
      "HEAD /openapi.json",
      "POST /runs/{runId}/complete",
      "POST /runs/{runId}/heartbeat",
    ]);
  });

  it("tells the API function where the console signs in, and as which client", () => {
    expect(apiEnvironment(variants.jwt).API_AUTH).toBe("jwt");
    expect(parseConsoleAuth(String(apiEnvironment(variants.jwt).CONSOLE_AUTH))).toEqual({
      kind: "oidc",
      issuer: "https://issuer.example.com/",
      clientId: "scheduler-console",
      // Without consoleScope the console asks for openid and the jwtScopes, for the API to take
      // its token.
      scope: "openid scheduler/api scheduler/admin",
    });
    expect(apiEnvironment(variants.dev).API_AUTH).toBe("iam");
    expect(parseConsoleAuth(String(apiEnvironment(variants.dev).CONSOLE_AUTH))).toEqual({
      kind: "iam",
    });
  });

  it("turns on active tracing, granting X-Ray writes and nothing else on *", () => {
    const synth = variants.jwt;
    for (const [, fn] of resourcesOfType(synth, "AWS::Lambda::Function")) {
      expect(fn.Properties?.TracingConfig).toEqual({ Mode: "Active" });
    }
    for (const component of COMPONENTS) {
      const unbound = { partition: "aws", region: "r", account: "a", resources: new Map() };
      const onAnything = grantsOfRole(synth, roleOfComponent(synth, component), unbound)
        .filter((grant) => grant.resources.includes("*"))
        .flatMap((grant) => grant.actions.map((action) => `${action} on *`))
        .sort();
      expect(onAnything, component).toEqual([
        "xray:PutTelemetryRecords on *",
        "xray:PutTraceSegments on *",
      ]);
    }
    for (const [, fn] of resourcesOfType(variants.dev, "AWS::Lambda::Function")) {
      expect(fn.Properties?.TracingConfig).toBeUndefined();
    }
  });

  it("subscribes the alarm e-mail to the stack's topic", () => {
    const synth = variants.jwt;
    synth.template.hasResourceProperties("AWS::SNS::Subscription", {
      Protocol: "email",
      Endpoint: "oncall@example.com",
      TopicArn: { Ref: logicalIdOf(synth.stack, synth.stack.observability.topic) },
    });
  });

  it("warns at synth when a stage other than dev sends its alarms to a topic nobody is subscribed to", () => {
    // `-c alarmEmail` holds for one command: a later deploy without it removes the subscription,
    // and every alarm then goes to a topic that tells no one.
    const unsubscribed = /alarms go to a topic nobody is subscribed to/;
    const { synth: prod, dispose: disposeProd } = synthesizeUnbundled({ stage: "prod" });
    try {
      Annotations.fromStack(prod.stack).hasWarning(
        "/Scheduler-prod/Observability",
        Match.stringLikeRegexp(unsubscribed.source),
      );
    } finally {
      disposeProd();
    }
    for (const quiet of [variants.dev, variants.jwt, variants.topic]) {
      Annotations.fromStack(quiet.stack).hasNoWarning(
        "*",
        Match.stringLikeRegexp(unsubscribed.source),
      );
    }
  });

  it("sends alarms to a given topic without creating one", () => {
    const synth = variants.topic;
    expect(resourcesOfType(synth, "AWS::SNS::Topic")).toEqual([]);
    const alarms = resourcesOfType(synth, "AWS::CloudWatch::Alarm");
    expect(alarms.length).toBeGreaterThan(0);
    for (const [, alarm] of alarms) {
      expect(alarm.Properties?.AlarmActions).toEqual([TOPIC_ARN]);
    }
    // The tables' throttling alarms among them.
    const throttling = alarms.filter(([, alarm]) =>
      JSON.stringify(alarm.Properties?.Metrics ?? null).includes('"AWS/DynamoDB"'),
    );
    expect(throttling.map(([, alarm]) => alarm.Properties?.OKActions)).toEqual([
      [TOPIC_ARN],
      [TOPIC_ARN],
      [TOPIC_ARN],
    ]);
  });

  it("treats every stage but dev as one to protect", () => {
    const table = (synth: Synthesized) =>
      propertiesOf(synth, synth.stack.storage.jobs.table).DeletionProtectionEnabled;
    expect(table(variants.topic)).toBe(true);
    expect(table(variants.dev)).toBe(false);
  });

  it("names the stack after the stage, so stages deploy side by side", () => {
    expect(variants.topic.stack.stackName).toBe("Scheduler-staging");
    const env = propertiesOf(variants.topic, variants.topic.stack.worker.worker.fn).Environment;
    const namespace = isObject(env) && isObject(env.Variables) ? env.Variables : {};
    expect(namespace.POWERTOOLS_METRICS_NAMESPACE).toBe("Scheduler/staging");
    const rule = propertiesOf(variants.topic, variants.topic.stack.dispatch.rule);
    expect(asArray(rule.Targets).map((t) => (isObject(t) ? referencedId(t.Arn) : null))).toEqual([
      logicalIdOf(variants.topic.stack, variants.topic.stack.dispatch.tick.fn),
    ]);
  });
});
