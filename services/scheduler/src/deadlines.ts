import type { TrackedJob } from '@trainyard/domain';
import type { Logger } from '@trainyard/service-kit';
import type { Clock } from './clock.ts';

/** The longest the timer is set for: a deadline further off is looked at again then. */
const MAX_WAIT_MS = 3_600_000;
/** After a stop that could not be recorded, the next look comes this soon. */
const AGAIN_MS = 1_000;

/** What the deadlines work with, passed in so that a test needs no NATS. */
export interface DeadlineDeps {
  /** The jobs as folded from the log so far. */
  jobs: () => Iterable<TrackedJob>;
  /** A job's deadline (ms since the epoch), or null where it has none now. */
  deadline: (job: TrackedJob) => number | null;
  /** What is done to a job past its deadline (say, `EnforceTimeLimit`). */
  enforce: (job: TrackedJob, now: Date) => Promise<void>;
  /** What is done, for a log line when doing it fails: `stop a job at its time limit`. */
  what: string;
  log: Pick<Logger, 'warn'>;
  /** The end of the term: no timer is set after it aborts. */
  signal: AbortSignal;
  clock: Clock;
}

/**
 * Deadlines of jobs, for one term (time limits of running attempts, gangs' acceptance): one
 * timer, set for the earliest. When it fires, `enforce` runs for every job past its deadline
 * (what it records, say `JobTimeLimitReached`, ends the deadline), and the timer is set for the
 * next. The decider checks each deadline again against the job as the log has it.
 */
export class Deadlines {
  #at: number | null = null;
  #cancel: (() => void) | undefined;

  constructor(private readonly deps: DeadlineDeps) {}

  /** A job changed: the timer comes forward to its deadline if that is sooner. */
  watch(job: TrackedJob): void {
    const deadline = this.deps.deadline(job);
    if (deadline !== null && (this.#at === null || deadline < this.#at)) this.#arm(deadline);
  }

  /** Enforces the deadlines that have passed, and sets the timer for the next. */
  check(): void {
    const { clock, signal } = this.deps;
    if (signal.aborted) return;
    const now = clock.now();
    let next: number | null = null;
    const due: TrackedJob[] = [];
    for (const job of this.deps.jobs()) {
      const deadline = this.deps.deadline(job);
      if (deadline === null) continue;
      if (deadline <= now.getTime()) due.push(job);
      else next = next === null ? deadline : Math.min(next, deadline);
    }
    // What is recorded folds back and ends the deadline; what failed is due at the next look.
    if (due.length > 0) next = Math.min(next ?? Infinity, now.getTime() + AGAIN_MS);
    this.#arm(next);
    for (const job of due) {
      this.deps.enforce(job, now).catch((err: unknown) => {
        this.deps.log.warn({ err, jobId: job.state.id }, `could not ${this.deps.what}`);
      });
    }
  }

  /** Drops the timer, as the term ends. */
  stop(): void {
    this.#cancel?.();
    this.#cancel = undefined;
  }

  #arm(at: number | null): void {
    this.stop();
    this.#at = at;
    if (at === null || this.deps.signal.aborted) return;
    const wait = Math.min(Math.max(0, at - this.deps.clock.now().getTime()), MAX_WAIT_MS);
    this.#cancel = this.deps.clock.after(wait, () => {
      this.#cancel = undefined;
      this.#at = null;
      this.check();
    });
  }
}
