import { buildSchedulerApp } from "../build-app.js";
import type { Template } from "./resources.js";

/** Synthesizes the stack in-process, without bundling the functions (the sandbox runs their source). */
export function synthesizeTemplate(context: Record<string, unknown> = {}): Template {
  const { app, stack } = buildSchedulerApp({
    context: { "aws:cdk:bundling-stacks": [], ...context },
  });
  return app.synth().getStackByName(stack.stackName).template as Template;
}
