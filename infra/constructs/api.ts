import { join } from "node:path";
import { Annotations, Duration, RemovalPolicy, Validations } from "aws-cdk-lib";
import {
  HttpApi,
  HttpMethod,
  HttpNoneAuthorizer,
  HttpStage,
  type IHttpRouteAuthorizer,
  LogGroupLogDestination,
} from "aws-cdk-lib/aws-apigatewayv2";
import { HttpIamAuthorizer, HttpJwtAuthorizer } from "aws-cdk-lib/aws-apigatewayv2-authorizers";
import { HttpLambdaIntegration } from "aws-cdk-lib/aws-apigatewayv2-integrations";
import { LogGroup } from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import { PUBLIC_GET_PATHS } from "../../shared/api/public-paths.js";
import { writeConsoleAssets } from "../../shared/console/build.js";
import { CONSOLE_PATH } from "../../shared/console/config.js";
import { JOBS_BY_TENANT_INDEX, RUNS_DEAD_LETTER_INDEX } from "../../shared/storage/tables.js";
import { allowQueues, allowTable, allowTableKey } from "../access.js";
import { apiEnvironment, isDevStage, type SchedulerSettings } from "../settings.js";
import type { Queues } from "./queues.js";
import { SchedulerFunction } from "./scheduler-function.js";
import type { Storage } from "./storage.js";

export interface ApiProps {
  readonly settings: SchedulerSettings;
  readonly storage: Storage;
  readonly queues: Queues;
  readonly engineEnvironment: Readonly<Record<string, string>>;
}

/**
 * The HTTP API: IAM (SigV4) authorization unless a JWT issuer is configured,
 * throttled, access-logged. The same function serves the web console's page
 * and bundle (/console), the API reference (/docs), the OpenAPI document
 * (/openapi.json) and the health check (/health) without authorization: they
 * hold no data, and the console then calls the API with the user's token.
 */
export class Api extends Construct {
  readonly handler: SchedulerFunction;
  readonly httpApi: HttpApi;
  readonly stage: HttpStage;

  constructor(scope: Construct, id: string, props: ApiProps) {
    super(scope, id);
    const { settings, storage, queues } = props;

    this.handler = new SchedulerFunction(this, "Handler", {
      component: "api",
      description: "Scheduler HTTP API: validates, stores, answers",
      // HTTP API integrations give up after 30 s.
      timeout: Duration.seconds(29),
      memorySize: 512,
      environment: { ...props.engineEnvironment, ...apiEnvironment(settings) },
      settings,
      // The console's browser bundle, beside the handler (functions/api/handler.ts reads console/).
      addToBundle: (outputDir) => writeConsoleAssets(join(outputDir, "console")),
    });
    // Create / edit / pause / cancel transactions (Put, Update, Delete of jobs, due entries and
    // idempotency items), job reads, the fast path's claim (Delete the due entry, orphan
    // DeleteItem), tenant listing (the byTenant index holds keys only: BatchGetItem reads the jobs),
    // quotas (a Query of the tenant's quota partition, the usage reserved with UpdateItem and
    // recounted with PutItem, the override read with GetItem and written with PutItem), a batch
    // create (its idempotency records read with BatchGetItem, the plain jobs and their due entries
    // put with BatchWriteItem).
    allowTable(this.handler.fn, {
      ...storage.jobs,
      // ConditionCheckItem: an async run's completion fans its trigger entry out to the job's
      // dependents, each dependent's run put with a check of that dependent's status (trigger.ts);
      // a replay's transaction checks its job is there and not cancelled (dead-letter-replay.ts).
      actions: [
        "GetItem",
        "BatchGetItem",
        "PutItem",
        "BatchWriteItem",
        "UpdateItem",
        "DeleteItem",
        "ConditionCheckItem",
        "Query",
      ],
      indexes: { [JOBS_BY_TENANT_INDEX]: ["Query"] },
    });
    // Run history and cancelling queued runs (Query of the job's partition), run reads, trigger
    // and replay transactions, cancel and resume (UpdateItem), dead-letter listing, the fast
    // path's BatchWriteItem (a create's runs, a batch create's runs of all its jobs), the runs
    // a job lists read with it and those of a tenant's lapsed concurrent-runs slots, which GET
    // /quotas counts as a start does (BatchGetItem). DeleteItem: a fast-path claim (create, edit,
    // resume) whose transaction fails for good after its run puts deletes the runs it put
    // (storage/claim.ts, deleteOwnRuns); denied, the request failed and left them to the reaper.
    // ConditionCheckItem: an edit or resume that files a one-off's occurrence beside its run read
    // under way checks in its transaction that the run is still so (job-update.ts,
    // runStillUnderWay); denied, every such edit and resume failed.
    allowTable(this.handler.fn, {
      ...storage.runs,
      actions: [
        "GetItem",
        "BatchGetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "ConditionCheckItem",
        "Query",
        "BatchWriteItem",
      ],
      indexes: { [RUNS_DEAD_LETTER_INDEX]: ["Query"] },
    });
    // GET /webhook-secret reads the caller's secret or makes it (conditional PutItem); rotate
    // updates it conditioned on the version read.
    allowTable(this.handler.fn, {
      ...storage.webhookSecrets,
      actions: ["GetItem", "PutItem", "UpdateItem"],
    });
    allowTableKey(this.handler.fn, storage.webhookSecretsKey);
    // The fast path, trigger-now and replay enqueue runs directly.
    allowQueues(this.handler.fn, queues.allWork, ["SendMessage"]);

    const authorizer: IHttpRouteAuthorizer =
      settings.auth.kind === "jwt"
        ? new HttpJwtAuthorizer("JwtAuthorizer", settings.auth.issuer, {
            jwtAudience: [...settings.auth.audience],
          })
        : new HttpIamAuthorizer();
    this.httpApi = new HttpApi(this, "HttpApi", {
      description: `Scheduler API (${settings.stage})`,
      createDefaultStage: false,
      defaultIntegration: new HttpLambdaIntegration("Lambda", this.handler.fn),
      defaultAuthorizer: authorizer,
      // With jwtScopes, a token of the issuer for an audience is not enough: it must carry one of
      // them (`scope` or `scp`), which an OIDC ID token for the console's client does not.
      ...(settings.auth.kind === "jwt" && settings.auth.scopes.length > 0
        ? { defaultAuthorizationScopes: [...settings.auth.scopes] }
        : {}),
    });
    const integration = new HttpLambdaIntegration("Pages", this.handler.fn);
    // A route each for the paths the app answers without credentials (PUBLIC_GET_PATHS): on
    // `$default` the authorizer would refuse them before the function saw them. Each takes HEAD
    // too, which the app answers as GET without the body (uptime monitors and link checkers probe
    // with it): on `$default` a HEAD would meet the authorizer, unlike the local server.
    for (const path of [CONSOLE_PATH, `${CONSOLE_PATH}/{proxy+}`, ...PUBLIC_GET_PATHS]) {
      for (const route of this.httpApi.addRoutes({
        path,
        methods: [HttpMethod.GET, HttpMethod.HEAD],
        integration,
        authorizer: new HttpNoneAuthorizer(),
        // Else CDK gives the route the API's default scopes, which only a JWT route can check.
        authorizationScopes: [],
      })) {
        Validations.of(route).acknowledge({
          id: "AwsSolutions-APIG4",
          reason:
            "The console's page and bundle, the API reference, the OpenAPI document and the health check are public and hold no data; the console calls the authorized API routes with the user's token (a browser cannot present one when it loads a page).",
        });
      }
    }
    // An async target's run routes authenticate in the function, by the run token its delivery
    // carried (random, its hash kept on the run; bound to the run and its fence): the target holds
    // no AWS or tenant credentials.
    for (const path of ["/runs/{runId}/heartbeat", "/runs/{runId}/complete"]) {
      for (const route of this.httpApi.addRoutes({
        path,
        methods: [HttpMethod.POST],
        integration,
        authorizer: new HttpNoneAuthorizer(),
        // Else CDK gives the route the API's default scopes, which only a JWT route can check.
        authorizationScopes: [],
      })) {
        Validations.of(route).acknowledge({
          id: "AwsSolutions-APIG4",
          reason:
            "An async target's heartbeat and completion are authorized by the run token (a random value the worker made for the delivery, verified by the API function against the hash the run keeps), not by IAM or JWT: the target holds neither.",
        });
      }
    }
    const accessLogs = new LogGroup(this, "AccessLogs", {
      retention: settings.logRetentionDays,
      removalPolicy: isDevStage(settings.stage) ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
    });
    this.stage = new HttpStage(this, "DefaultStage", {
      httpApi: this.httpApi,
      stageName: "$default",
      autoDeploy: true,
      // The stage's default route settings: API Gateway applies them per route, a bucket each
      // (route-level throttling), not one bucket for the stage. Every authenticated call goes
      // through the one `$default` route, all tenants together; a flood on a public route spends
      // that route's rate only. The account's regional limit is the one bucket all APIs share.
      throttle: { rateLimit: settings.apiRateLimit, burstLimit: settings.apiBurstLimit },
      accessLogSettings: { destination: new LogGroupLogDestination(accessLogs) },
    });
    // A warning, not a refusal: the stage still throttles every tenant together, and an operator
    // may mean to lean on it alone; but the tenant quota they set then does nothing.
    const { requestsPerSecond } = settings.quotas;
    if (requestsPerSecond > settings.apiRateLimit)
      Annotations.of(this).addWarningV2(
        "scheduler:quota-above-api-rate",
        `quotaRequestsPerSecond ${requestsPerSecond} is above apiRateLimit ${settings.apiRateLimit}: every tenant's requests share API Gateway's ${settings.apiRateLimit} a second, which answers 429 first, so a tenant never reaches its quota and one tenant can spend the whole rate; set quotaRequestsPerSecond a few times below apiRateLimit (docs/deploy.md, "Settings")`,
      );
  }
}
