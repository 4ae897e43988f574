/**
 * GPU time by account (a user, or a team under `teamAccount`) in the current calendar month
 * (UTC), kept as it accrues: the GPUs an account holds change only as its attempts and runs are
 * booked and freed, so its usage is brought up to each change, and to any moment it is asked of.
 */

/** An account's GPU time in `month`, brought up to `atMs`. */
export interface MonthUsage {
  /** `YYYY-MM`. */
  month: string;
  gpuMs: number;
  atMs: number;
}

export const monthOf = (ms: number): string => new Date(ms).toISOString().slice(0, 7);

function monthStartMs(ms: number): number {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** When the month after `now`'s starts (UTC). */
export function nextMonthStart(now: Date): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
}

/**
 * Usage brought up to `atMs`, `gpus` having been held since it was last brought up; a new month
 * starts from nothing but what was held into it. Time never goes back: clocks of the processes
 * that write events may disagree a little.
 */
export function advanced(usage: MonthUsage | undefined, gpus: number, atMs: number): MonthUsage {
  if (!usage) return { month: monthOf(atMs), gpuMs: 0, atMs };
  const t = Math.max(atMs, usage.atMs);
  const month = monthOf(t);
  if (month !== usage.month) return { month, gpuMs: gpus * (t - monthStartMs(t)), atMs: t };
  return { month, gpuMs: usage.gpuMs + gpus * (t - usage.atMs), atMs: t };
}

/** GPU-hours of a usage. */
export const gpuHoursOf = (usage: MonthUsage): number => usage.gpuMs / 3_600_000;

/**
 * The key a team's quota and what its work holds are kept under, beside users' (a username
 * has no colon).
 */
export const TEAM_PREFIX = 'team:';
export const teamAccount = (team: string): string => `${TEAM_PREFIX}${team}`;

/** Adds `gpus` (fewer, when negative) to what `owner` holds. */
export function countHeld(held: Map<string, number>, owner: string, gpus: number): void {
  if (gpus === 0) return;
  const now = (held.get(owner) ?? 0) + gpus;
  if (now > 0) held.set(owner, now);
  else held.delete(owner);
}

/**
 * Brings an account's usage up to `atMs`, then changes what it holds by `gpus` (fewer, when
 * negative).
 */
export function chargeAccount(
  held: Map<string, number>,
  usage: Map<string, MonthUsage>,
  name: string,
  gpus: number,
  atMs: number,
): void {
  if (gpus === 0) return;
  usage.set(name, advanced(usage.get(name), held.get(name) ?? 0, atMs));
  countHeld(held, name, gpus);
}

/** The GPU-hours an account's work has taken this month, as of `nowMs`, running work counted. */
export function hoursUsed(
  held: ReadonlyMap<string, number>,
  usage: ReadonlyMap<string, MonthUsage>,
  name: string,
  nowMs: number,
): number {
  const u = usage.get(name);
  return u ? gpuHoursOf(advanced(u, held.get(name) ?? 0, nowMs)) : 0;
}

/** Sets an account's limit in a map of quotas; null lifts it. */
export function setQuota(quotas: Map<string, number>, account: string, limit: number | null): void {
  if (limit === null) quotas.delete(account);
  else quotas.set(account, limit);
}
