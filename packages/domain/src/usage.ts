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
