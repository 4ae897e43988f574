/**
 * Quotas as placement reads them: the GPUs users and teams may hold at once, and the GPU-hours
 * they may take a month, booked as a round places work.
 */
import { gpuHoursUsed, type ClusterState } from './cluster.ts';
import type { Candidate } from './candidates.ts';

/**
 * The GPUs users and teams with a quota may hold, and hold, as a round books more for them
 * (teams under `teamAccount`).
 */
export interface QuotaBook {
  limits: ReadonlyMap<string, number>;
  held: Map<string, number>;
  /** The GPU-hours a month each account may take, and has taken (worked out once a round). */
  hourLimits: ReadonlyMap<string, number>;
  hoursUsed: (account: string) => number;
}

/** The quota book a round at `now` starts from; none when no user or team has a quota. */
export function quotaBook(cluster: ClusterState, now: Date): QuotaBook | undefined {
  if (cluster.quotas.size === 0 && cluster.hourQuotas.size === 0) return undefined;
  const used = new Map<string, number>();
  return {
    limits: cluster.quotas,
    held: new Map(cluster.gpusHeld),
    hourLimits: cluster.hourQuotas,
    hoursUsed: (account) => {
      let hours = used.get(account);
      if (hours === undefined)
        used.set(account, (hours = gpuHoursUsed(cluster, account, now.getTime())));
      return hours;
    },
  };
}

/**
 * A quota that holds a candidate back: what its user (or team, when `team`) holds and may, in
 * GPUs at once, or in GPU-hours this month.
 */
export interface OverQuota {
  kind: 'gpus' | 'gpuHours';
  /** GPUs held at once; for `gpuHours`, the GPU-hours taken this month. */
  held: number;
  limit: number;
  /** The team whose quota it is; null for its owner's own. */
  team: string | null;
}

/** Which of an account's quotas `gpus` more would pass, as booked so far; null for none. */
function pastQuota(quota: QuotaBook, account: string, gpus: number): OverQuota['kind'] | null {
  const limit = quota.limits.get(account);
  if (limit !== undefined && (quota.held.get(account) ?? 0) + gpus > limit) return 'gpus';
  const hourLimit = quota.hourLimits.get(account);
  return hourLimit !== undefined && quota.hoursUsed(account) >= hourLimit ? 'gpuHours' : null;
}

/**
 * Whether its owner's quota, or its team's, holds a candidate back, as booked so far (the
 * placement loop's question: it allocates nothing).
 */
export function heldBack(job: Candidate, quota: QuotaBook | undefined): boolean {
  const gpus = job.resources.gpus * job.nodes;
  if (!quota || gpus === 0) return false;
  if (pastQuota(quota, job.owner, gpus) !== null) return true;
  return job.teamAccount !== null && pastQuota(quota, job.teamAccount, gpus) !== null;
}

/**
 * Where its owner's quota, or else its team's, holds a candidate back, as booked so far. Null
 * when neither does (or neither has a quota, or it takes no GPU).
 */
export function overQuota(job: Candidate, quota: QuotaBook | undefined): OverQuota | null {
  const gpus = job.resources.gpus * job.nodes;
  if (!quota || gpus === 0) return null;
  const over = (account: string, team: string | null): OverQuota | null => {
    const kind = pastQuota(quota, account, gpus);
    if (kind === null) return null;
    return kind === 'gpus'
      ? { kind, held: quota.held.get(account) ?? 0, limit: quota.limits.get(account)!, team }
      : { kind, held: quota.hoursUsed(account), limit: quota.hourLimits.get(account)!, team };
  };
  return (
    over(job.owner, null) ?? (job.teamAccount === null ? null : over(job.teamAccount, job.team))
  );
}

export function bookQuota(job: Candidate, quota: QuotaBook | undefined): void {
  const gpus = job.resources.gpus * job.nodes;
  if (!quota || gpus === 0) return;
  if (quota.limits.has(job.owner))
    quota.held.set(job.owner, (quota.held.get(job.owner) ?? 0) + gpus);
  const team = job.teamAccount;
  if (team !== null && quota.limits.has(team))
    quota.held.set(team, (quota.held.get(team) ?? 0) + gpus);
}
