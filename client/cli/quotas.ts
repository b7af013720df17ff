import { type Command, Option } from "commander";
import type { QuotaOverride, TenantQuotas } from "../index.js";
import { contextOf } from "./context.js";
import { readInterruptibly } from "./interrupt.js";
import { wholeNumber } from "./job-options.js";
import { type CliIo, printable, table } from "./output.js";

const QUOTA_ROWS: readonly (keyof TenantQuotas["quotas"])[] = [
  "activeJobs",
  "runsPerMinute",
  "concurrentRuns",
  "requestsPerSecond",
  "maxPriority",
];

/**
 * A counted quota's option: a whole number, or `none` for no limit. Commander turns a parser's
 * null into "", which the API refuses as not a number: "none" is kept until the override is made.
 */
const NONE = "none";
function capOrNone(raw: string): number | typeof NONE {
  return raw.trim() === NONE ? NONE : wholeNumber(raw);
}
const capOf = (value: number | typeof NONE): number | null => (value === NONE ? null : value);

function quotasTable(view: TenantQuotas): string {
  return [
    printable(`tenant ${view.tenantId}: ${view.runningRuns} run(s) running now`),
    table(
      ["QUOTA", "APPLIES", "FROM"],
      QUOTA_ROWS.map((name) => [
        name,
        String(view.quotas[name] ?? "none"),
        view.override[name] === undefined ? "default" : "override",
      ]),
    ),
  ].join("\n");
}

export function quotasCommand(program: Command, io: CliIo): void {
  const quotas = program
    .command("quotas")
    .description("your tenant's quotas; an admin tenant's view and overrides of any tenant's");

  quotas
    .command("get")
    .description("the quotas that apply (yours, or TENANT's for an admin tenant)")
    .argument("[tenant]", "another tenant (admin tenants only)")
    .action(async (tenant: string | undefined, _flags, command: Command) => {
      const context = contextOf(command, io);
      const view = await readInterruptibly(io, (options) =>
        tenant === undefined
          ? context.client.quotas.get(options)
          : context.client.quotas.getTenant(tenant, options),
      );
      context.print(view, quotasTable);
    });

  quotas
    .command("set")
    .description(
      "replace TENANT's override (admin tenants only); quotas not given take the defaults, none given removes it",
    )
    .argument("<tenant>", "the tenant whose quotas to set")
    .option("--active-jobs <n>", "jobs not ended (active or paused), or none", capOrNone)
    .option(
      "--runs-per-minute <n>",
      "peak runs per minute over the tenant's jobs (a dependent counts its upstreams'), or none",
      capOrNone,
    )
    .option("--concurrent-runs <n>", "runs running at once (1-1000), or none", capOrNone)
    .option("--requests-per-second <n>", "API requests per second", wholeNumber)
    .addOption(
      new Option("--max-priority <priority>", "the highest priority its jobs may take").choices([
        "high",
        "normal",
        "low",
      ]),
    )
    .action(async (tenant: string, flags, command: Command) => {
      const context = contextOf(command, io);
      const override: QuotaOverride = {
        ...(flags.activeJobs === undefined ? {} : { activeJobs: capOf(flags.activeJobs) }),
        ...(flags.runsPerMinute === undefined ? {} : { runsPerMinute: capOf(flags.runsPerMinute) }),
        ...(flags.concurrentRuns === undefined
          ? {}
          : { concurrentRuns: capOf(flags.concurrentRuns) }),
        ...(flags.requestsPerSecond === undefined
          ? {}
          : { requestsPerSecond: flags.requestsPerSecond }),
        ...(flags.maxPriority === undefined ? {} : { maxPriority: flags.maxPriority }),
      };
      context.print(await context.client.quotas.setTenant(tenant, override), quotasTable);
    });
}
