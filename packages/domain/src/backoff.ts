export interface BackoffPolicy {
  baseMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 5_000, maxMs: 5 * 60_000 };

/**
 * Exponential backoff with full jitter for the retry after attempt `attempt` (1-based).
 * `jitter` in [0, 1) comes from the caller so that this stays pure.
 */
export function backoffMs(attempt: number, jitter: number, policy = DEFAULT_BACKOFF): number {
  const ceiling = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (ceiling / 2) * jitter);
}
