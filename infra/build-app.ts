import { App, type AppProps, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks } from "cdk-nag";
import { SchedulerStack } from "./scheduler-stack.js";
import { isDevStage, settingsFromContext } from "./settings.js";

function stackIdFor(stage: string): string {
  return `Scheduler-${stage}`;
}

/**
 * The CDK app: one SchedulerStack configured from context, checked by
 * cdk-nag's AwsSolutions pack on every synth (a finding without a
 * suppression fails the synth). Tests build it the same way.
 */
export function buildSchedulerApp(props: AppProps = {}): { app: App; stack: SchedulerStack } {
  const app = new App(props);
  const settings = settingsFromContext(app.node);
  const stack = new SchedulerStack(app, stackIdFor(settings.stage), {
    settings,
    description: `Serverless job scheduler (${settings.stage})`,
    // A stage's tables and key outlive its stack (Retain), but a deploy after a delete makes new,
    // empty ones and leaves every accepted job in the old: outside dev, `cdk destroy` is refused.
    terminationProtection: !isDevStage(settings.stage),
  });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, stack };
}
