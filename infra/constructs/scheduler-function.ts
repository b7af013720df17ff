import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Duration, RemovalPolicy, Validations } from "aws-cdk-lib";
import { PolicyStatement, Role, ServicePrincipal } from "aws-cdk-lib/aws-iam";
import { Architecture, Runtime, Tracing } from "aws-cdk-lib/aws-lambda";
import { LogLevel, NodejsFunction, OutputFormat } from "aws-cdk-lib/aws-lambda-nodejs";
import { LogGroup } from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import { type Component, functionEnvironment } from "../lambda-environment.js";
import { isDevStage, type SchedulerSettings } from "../settings.js";

const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));

export function handlerEntry(component: Component): string {
  return join(REPO_ROOT, "functions", component, "handler.ts");
}

/**
 * ESM output lets the worker use top-level await; `require` is recreated for
 * the CommonJS dependencies esbuild keeps as `require` calls.
 */
const ESM_REQUIRE_BANNER =
  "import { createRequire } from 'module'; const require = createRequire(import.meta.url);";

export interface SchedulerFunctionProps {
  readonly component: Component;
  readonly description: string;
  readonly timeout: Duration;
  readonly memorySize: number;
  readonly environment: Readonly<Record<string, string>>;
  readonly settings: SchedulerSettings;
  /** Files to add to the bundle beside the handler: called with the bundle's directory, once bundling runs. */
  readonly addToBundle?: (outputDir: string) => void;
}

/**
 * A handler as a Lambda: nodejs22.x on arm64, bundled locally by esbuild,
 * with its own log group (retention set, no log-retention custom resource)
 * and its own role that starts with nothing but writing to that log group.
 * Each component grants the table and queue actions it uses on top.
 */
export class SchedulerFunction extends Construct {
  readonly fn: NodejsFunction;
  readonly role: Role;
  readonly logGroup: LogGroup;

  constructor(scope: Construct, id: string, props: SchedulerFunctionProps) {
    super(scope, id);
    const { settings } = props;
    const dev = isDevStage(settings.stage);
    this.logGroup = new LogGroup(this, "Logs", {
      retention: settings.logRetentionDays,
      removalPolicy: dev ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
    });
    this.role = new Role(this, "Role", {
      assumedBy: new ServicePrincipal("lambda.amazonaws.com"),
      description: `Scheduler ${props.component} function (${settings.stage})`,
    });
    // Instead of AWSLambdaBasicExecutionRole, which may write to every log group in the account.
    this.role.addToPrincipalPolicy(
      new PolicyStatement({
        actions: ["logs:CreateLogStream", "logs:PutLogEvents"],
        resources: [this.logGroup.logGroupArn],
      }),
    );
    this.fn = new NodejsFunction(this, "Function", {
      entry: handlerEntry(props.component),
      handler: "handler",
      description: props.description,
      runtime: Runtime.NODEJS_22_X,
      architecture: Architecture.ARM_64,
      memorySize: props.memorySize,
      timeout: props.timeout,
      role: this.role,
      logGroup: this.logGroup,
      tracing: settings.tracing ? Tracing.ACTIVE : Tracing.DISABLED,
      projectRoot: REPO_ROOT,
      depsLockFilePath: join(REPO_ROOT, "package-lock.json"),
      environment: functionEnvironment(
        props.component,
        settings.metricsNamespace,
        props.environment,
      ),
      bundling: {
        // Synth must work on a machine with no Docker engine: esbuild from node_modules only.
        forceDockerBundling: false,
        format: OutputFormat.ESM,
        target: "node22",
        mainFields: ["module", "main"],
        banner: ESM_REQUIRE_BANNER,
        minify: true,
        sourceMap: true,
        sourcesContent: false,
        // The SDK is bundled, not taken from the runtime: the handlers are tested against the
        // versions in package-lock.json (shared/aws.ts relies on their endpoint resolution).
        externalModules: [],
        logLevel: LogLevel.ERROR,
        ...(props.addToBundle
          ? {
              commandHooks: {
                beforeBundling: () => [],
                beforeInstall: () => [],
                // Only called when the asset is bundled (not when a test skips bundling).
                afterBundling: (_inputDir: string, outputDir: string) => {
                  props.addToBundle?.(outputDir);
                  return [];
                },
              },
            }
          : {}),
      },
    });
    Validations.of(this.fn).acknowledge({
      id: "AwsSolutions-L1",
      reason:
        "The runtime is pinned to nodejs22.x, the one the design and the test suites target; moving to a newer runtime is a deliberate change made after running the suites on it.",
    });
    if (settings.tracing) {
      Validations.of(this.role).acknowledge({
        id: "AwsSolutions-IAM5[Resource::*]",
        reason:
          "X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions; CDK grants them on * when tracing is on.",
      });
    }
  }
}
