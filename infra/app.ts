import { buildSchedulerApp } from "./build-app.js";

// `npx cdk synth|deploy` runs this file (cdk.json); settings come from `-c key=value`.
buildSchedulerApp();
