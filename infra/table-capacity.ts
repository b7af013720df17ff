/**
 * How the jobs and runs tables are billed: on demand (the default), or provisioned with auto
 * scaling, which costs about half as much a run at a steady load (bench/results, "$ DDB prov.
 * 70%") and throttles a burst above what is provisioned until auto scaling catches up.
 */
export type TableCapacity = { readonly mode: "on-demand" } | ProvisionedCapacity;

export interface ProvisionedCapacity {
  readonly mode: "provisioned";
  /** Auto scaling's floor for reads and for writes, of each table and each of its indexes. */
  readonly minUnits: number;
  readonly maxReadUnits: number;
  readonly maxWriteUnits: number;
  /** The share of what is provisioned that target tracking keeps consumed. */
  readonly targetUtilizationPercent: number;
}

/** As given: every field may be left out, and only `mode` without `provisioned`. */
export interface TableCapacityInput {
  readonly mode?: string;
  readonly minUnits?: number;
  readonly maxReadUnits?: number;
  readonly maxWriteUnits?: number;
  readonly targetUtilizationPercent?: number;
}

export const PROVISIONED_DEFAULTS = {
  minUnits: 5,
  maxReadUnits: 1000,
  maxWriteUnits: 1000,
  // The utilisation the requests bench prices provisioned capacity at.
  targetUtilizationPercent: 70,
} as const;

/** An on-demand table's default throughput ceiling, and a provisioned table's default quota. */
const MAX_TABLE_UNITS = 40_000;

/** The context key of each field, by which a refusal names it. */
const TABLE_CAPACITY_KEYS = {
  mode: "tableCapacity",
  minUnits: "tableMinUnits",
  maxReadUnits: "tableMaxReadUnits",
  maxWriteUnits: "tableMaxWriteUnits",
  targetUtilizationPercent: "tableTargetUtilization",
} as const;

/** The capacity a deployment asked for, or an error naming every setting that is wrong. */
export function resolveTableCapacity(input: TableCapacityInput = {}): TableCapacity {
  const mode = input.mode ?? "on-demand";
  const { mode: _mode, ...units } = input;
  const given = Object.entries(units)
    .filter(([, value]) => value !== undefined)
    .map(([field]) => TABLE_CAPACITY_KEYS[field as keyof typeof units]);
  if (mode === "on-demand") {
    if (given.length === 0) return { mode };
    throw refusal([
      `${given.join(", ")} ${given.length === 1 ? "applies" : "apply"} only with tableCapacity=provisioned (the tables are billed on demand, which has no units to set)`,
    ]);
  }
  if (mode !== "provisioned") {
    throw refusal([`tableCapacity must be on-demand or provisioned, got "${mode}"`]);
  }
  const capacity: ProvisionedCapacity = {
    mode,
    minUnits: units.minUnits ?? PROVISIONED_DEFAULTS.minUnits,
    maxReadUnits: units.maxReadUnits ?? PROVISIONED_DEFAULTS.maxReadUnits,
    maxWriteUnits: units.maxWriteUnits ?? PROVISIONED_DEFAULTS.maxWriteUnits,
    targetUtilizationPercent:
      units.targetUtilizationPercent ?? PROVISIONED_DEFAULTS.targetUtilizationPercent,
  };
  const problems: string[] = [];
  const intIn = (field: keyof typeof units, min: number, max: number) => {
    const value = capacity[field];
    if (!(Number.isInteger(value) && value >= min && value <= max)) {
      problems.push(
        `${TABLE_CAPACITY_KEYS[field]} must be an integer from ${min} to ${max}, got ${value}`,
      );
    }
  };
  intIn("minUnits", 1, MAX_TABLE_UNITS);
  intIn("maxReadUnits", capacity.minUnits, MAX_TABLE_UNITS);
  intIn("maxWriteUnits", capacity.minUnits, MAX_TABLE_UNITS);
  // What DynamoDB's target tracking accepts.
  intIn("targetUtilizationPercent", 20, 90);
  if (problems.length > 0) throw refusal(problems);
  return capacity;
}

function refusal(problems: readonly string[]): Error {
  return new Error(`invalid scheduler settings:\n${problems.map((p) => `- ${p}`).join("\n")}`);
}
