/**
 * How long a run over its tenant's concurrent-runs quota waits on the Lambda worker before it
 * looks again (back to QUEUED with a fresh message). Each look costs reads of the run and job, a
 * consistent Query of the tenant's quota partition, a write of the run and three SQS requests
 * (docs/api.md "Quotas"), for as long as the tenant's slots stay held. The ceiling grows with the
 * looks the run has had: a run that has waited about a minute looks again within a minute, so a
 * backlog waiting for hours costs at most 120 looks an hour a run, at the price of starting up to
 * 60 s after a slot frees rather than 16 s.
 */
const QUOTA_RECHECK_MS = 1_000;
const QUOTA_RECHECK_MAX_MS = 60_000;

/**
 * 1 s at the run's first start, doubling with each start it has had (its fence) up to 60 s, less
 * up to half at random so waiting runs do not come back together: 1, 2, 4, 8, 16, 32, then 60 s,
 * reached after 31.5 to 63 s of waiting.
 */
export function quotaRecheckMs(fence: number, random: () => number): number {
  const ceiling = Math.min(QUOTA_RECHECK_MAX_MS, QUOTA_RECHECK_MS * 2 ** Math.max(0, fence - 1));
  return Math.round(ceiling * (1 - random() / 2));
}
