import {
  plan,
  type Assignment,
  type ClusterState,
  type PlacementPolicy,
  type Preemption,
} from '@trainyard/domain';
import { retry } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';
import { pause, realClock, type Clock } from './clock.ts';

/** The pause after a failed round before the log is read again, the first of a growing few. */
const RESYNC_MS = 500;
/** A round woken for a plan's `wakeAt` runs this much after it, so that the retry is due. */
const WAKE_LATE_MS = 5;
/**
 * The longest a wake is armed for (a timer cannot wait past 2^31 ms, nearly 25 days; a wake at
 * the turn of the month may be further): a round then plans again, and arms the rest.
 */
const MAX_WAKE_MS = 3_600_000;

/** What the rounds work with; all of it is passed in, so that a test needs no NATS. */
export interface RoundDeps {
  /** The cluster state as folded from the log so far. */
  state: () => ClusterState;
  policy: PlacementPolicy;
  /** Performs one assignment: the stream sequence its events landed at, or 0 when none did. */
  assign: (assignment: Assignment, now: Date) => Promise<number>;
  /** Stops an attempt for waiting work of a higher priority: as `assign`, its sequence or 0. */
  preempt: (preemption: Preemption, now: Date) => Promise<number>;
  /** The sequence of the last event in the log. */
  lastSeq: () => Promise<number>;
  log: Pick<Logger, 'warn' | 'error'>;
  /** The end of the term: no round starts after it aborts. */
  signal: AbortSignal;
  clock?: Clock;
}

/**
 * The planning rounds of one term, once it has caught up with the log. At most one round runs
 * at a time, and a wake-up during one means one more round after it. A round waits for its
 * predecessor's assignments to come back through the log before planning, so the state it plans
 * on always includes them.
 */
export class Rounds {
  #planning = false;
  #again = false;
  /** The state must have folded up to here before the next round plans. */
  #awaitSeq = 0;
  #cancelWake: (() => void) | undefined;
  #soon: NodeJS.Immediate | undefined;
  readonly #clock: Clock;

  constructor(private readonly deps: RoundDeps) {
    this.#clock = deps.clock ?? realClock;
  }

  /** Coalesces the many wake-ups of a busy log into one round per turn of the event loop. */
  wakeSoon(): void {
    this.#soon ??= setImmediate(() => {
      this.#soon = undefined;
      this.wake();
    });
  }

  /** Plans and assigns, unless a round is running or our last assignments are not back yet. */
  wake(): void {
    if (this.deps.signal.aborted) return;
    if (this.#planning || this.deps.state().lastSeq < this.#awaitSeq) {
      this.#again = true;
      return;
    }
    this.#planning = true;
    this.#again = false;
    this.#round()
      .catch(async (err: unknown) => {
        this.deps.log.error({ err }, 'scheduling round failed; planning again after the log');
        await this.#resync();
      })
      .finally(() => {
        this.#planning = false;
        if (this.#again) this.wake();
      });
  }

  /** Drops the wake-ups still pending, as the term ends. */
  stop(): void {
    this.#cancelWake?.();
    clearImmediate(this.#soon);
  }

  async #round(): Promise<void> {
    const now = this.#clock.now();
    const { assignments, preemptions, wakeAt } = plan(this.deps.state(), now, this.deps.policy);
    this.#armWake(wakeAt, now);
    if (assignments.length === 0 && preemptions.length === 0) return;
    const results = await Promise.allSettled([
      ...assignments.map(async (a) => this.deps.assign(a, now)),
      ...preemptions.map(async (p) => this.deps.preempt(p, now)),
    ]);
    for (const r of results) {
      if (r.status === 'fulfilled') this.#awaitSeq = Math.max(this.#awaitSeq, r.value);
    }
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /**
   * After a failed round: an assignment whose append got no answer may still have landed, so
   * the next round waits until the state holds everything the log held after the failure.
   */
  async #resync(): Promise<void> {
    const { signal, log } = this.deps;
    await pause(this.#clock, RESYNC_MS, signal);
    if (signal.aborted) return;
    await retry(
      async () => {
        this.#awaitSeq = Math.max(this.#awaitSeq, await this.deps.lastSeq());
        this.#again = true;
      },
      {
        attempts: Infinity,
        baseMs: RESYNC_MS,
        maxMs: 5_000,
        signal,
        onRetry: (err) => log.warn({ err }, 'cannot read the log; scheduling waits'),
      },
    ).catch(() => undefined);
  }

  #armWake(wakeAt: Date | null, now: Date): void {
    this.#cancelWake?.();
    this.#cancelWake = undefined;
    if (!wakeAt) return;
    const ms = Math.min(MAX_WAKE_MS, Math.max(0, wakeAt.getTime() - now.getTime()) + WAKE_LATE_MS);
    this.#cancelWake = this.#clock.after(ms, () => this.wake());
  }
}
