/** How many failed logins a window allows, per user and per source address. */
export interface ThrottleLimits {
  windowMs: number;
  perUser: number;
  perSource: number;
}

export const DEFAULT_THROTTLE: ThrottleLimits = {
  windowMs: 15 * 60_000,
  perUser: 10,
  perSource: 50,
};

/** At most this many names and addresses are tracked; the oldest are forgotten first. */
const MAX_TRACKED = 100_000;

/**
 * Failed logins per user and per source address over a sliding window. Once either is over its
 * limit, logins for it are refused, right password or not, until enough failures age out. Each
 * API replica counts its own; the limits are per replica.
 */
export class LoginThrottle {
  readonly #failures = new Map<string, number[]>();
  constructor(
    private readonly limits: ThrottleLimits = DEFAULT_THROTTLE,
    private readonly now: () => number = Date.now,
  ) {}

  #recent(key: string): number[] {
    const since = this.now() - this.limits.windowMs;
    const kept = (this.#failures.get(key) ?? []).filter((t) => t > since);
    if (kept.length === 0) this.#failures.delete(key);
    else this.#failures.set(key, kept);
    return kept;
  }

  /** Milliseconds until a login for `username` from `source` may be tried, or 0 now. */
  waitMs(username: string, source: string): number {
    const waits = [
      [this.#recent(`u:${username}`), this.limits.perUser],
      [this.#recent(`s:${source}`), this.limits.perSource],
    ] as const;
    let wait = 0;
    for (const [times, limit] of waits) {
      if (times.length >= limit) {
        const freeAt = times[times.length - limit]! + this.limits.windowMs;
        wait = Math.max(wait, freeAt - this.now());
      }
    }
    return wait;
  }

  failed(username: string, source: string): void {
    for (const key of [`u:${username}`, `s:${source}`]) {
      const times = this.#recent(key);
      times.push(this.now());
      this.#failures.delete(key);
      this.#failures.set(key, times);
    }
    while (this.#failures.size > MAX_TRACKED) {
      const oldest = this.#failures.keys().next().value;
      if (oldest === undefined) break;
      this.#failures.delete(oldest);
    }
  }

  succeeded(username: string): void {
    this.#failures.delete(`u:${username}`);
  }
}
