/**
 * Failed logins counted per key (a source address, a session name) over a sliding window, so
 * that a password guesser is stopped before the dependencies are asked again.
 */
export class FailureWindow {
  private readonly failures = new Map<string, number[]>();

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Counts one failure for `key`; what it returns takes that failure back. */
  record(key: string): () => void {
    const at = this.now();
    const times = this.recent(key);
    times.push(at);
    this.failures.set(key, times);
    return () => {
      const kept = this.failures.get(key) ?? [];
      const i = kept.indexOf(at);
      if (i >= 0) kept.splice(i, 1);
    };
  }

  /** Whether `key` has used up its failures within the window. */
  exceeded(key: string): boolean {
    const times = this.recent(key);
    if (times.length === 0) this.failures.delete(key);
    else this.failures.set(key, times);
    return times.length >= this.limit;
  }

  /** Forgets keys whose failures have all left the window, so the map does not grow forever. */
  prune(): void {
    for (const key of [...this.failures.keys()]) this.exceeded(key);
  }

  private recent(key: string): number[] {
    const since = this.now() - this.windowMs;
    return (this.failures.get(key) ?? []).filter((t) => t > since);
  }
}

const noop = () => {};

export type LoginMethod = 'password' | 'publickey';

/** How many failed logins are allowed, and over how long. */
export interface LoginLimits {
  /** Failures allowed from one source address within the window (default 10). */
  failuresPerSource?: number;
  /** Password failures allowed against one session name (the SSH username) within the window (default 20). */
  failuresPerUser?: number;
  /** The window, in milliseconds (default 5 minutes). */
  windowMs?: number;
  /** How long a connection may take to log in before it is dropped (default 30 s). */
  authTimeoutMs?: number;
}

/**
 * Both counts of a gateway. Any login from a source that used up its failures is refused. A
 * password for a session name that used up its failures is refused too, wherever it comes from:
 * a guesser spread over many addresses. Public keys are not counted or refused by name, as a key
 * cannot be guessed: so no one, by failing against a session's name, can lock its owner's keys
 * out.
 */
export class LoginRateLimit {
  private readonly bySource: FailureWindow;
  private readonly byUser: FailureWindow;
  private readonly pruner: NodeJS.Timeout;

  constructor(limits: LoginLimits = {}, now: () => number = Date.now) {
    const windowMs = limits.windowMs ?? 5 * 60_000;
    this.bySource = new FailureWindow(limits.failuresPerSource ?? 10, windowMs, now);
    this.byUser = new FailureWindow(limits.failuresPerUser ?? 20, windowMs, now);
    this.pruner = setInterval(() => {
      this.bySource.prune();
      this.byUser.prune();
    }, windowMs);
    this.pruner.unref();
  }

  /** Whether a login from `source` for `user` must be refused without asking anyone. */
  limited(source: string, user: string, method: LoginMethod): boolean {
    return this.bySource.exceeded(source) || (method === 'password' && this.byUser.exceeded(user));
  }

  /**
   * Counts a login as refused, against its source and (a password) its user, from the moment it
   * is asked about, so that logins made side by side meet the limit as soon as ones made one
   * after another do. What it returns takes the count back: for a login that succeeded, or that
   * was never decided.
   */
  begin(source: string, user: string, method: LoginMethod): () => void {
    const forSource = this.bySource.record(source);
    const forUser = method === 'password' ? this.byUser.record(user) : noop;
    return () => {
      forSource();
      forUser();
    };
  }

  /** Stops the background pruning. */
  stop(): void {
    clearInterval(this.pruner);
  }
}

/**
 * Whom a connection's logins are counted against: its IPv4 address, or the /64 network of its
 * IPv6 address (one host is commonly given a whole /64).
 */
export function sourceOf(address: string): string {
  const ip = address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
  if (!ip.includes(':')) return ip;
  const [head = '', tail] = ip.toLowerCase().split('::');
  const front = head ? head.split(':') : [];
  const back = tail ? tail.split(':') : [];
  const groups = [
    ...front,
    ...Array<string>(Math.max(0, 8 - front.length - back.length)).fill('0'),
    ...back,
  ];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
