import { gangSize, slotHolder, type AttemptState, type TrackedJob } from '@trainyard/domain';
import type { StoredEvent } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';

/** What the gangs work with, passed in so that a test needs no NATS. */
export interface GangDeps {
  /** Tells the worker of each member of the attempt to stop it. */
  stop: (jobId: string, attempt: AttemptState) => Promise<void>;
  log: Pick<Logger, 'warn'>;
}

/**
 * Gang jobs' live attempts, for one term. An attempt ends with its first member to fail (or
 * with a cancel, or when its members did not all start in time): then every member's worker is
 * told to stop its part, since the others still run, or are yet to start.
 */
export class Gangs {
  /** Live attempts of gangs, by job: what to stop once they end. */
  readonly #live = new Map<string, AttemptState>();

  constructor(private readonly deps: GangDeps) {}

  /** The job as folded after one of its events (absent once it ended). */
  folded(event: StoredEvent, job: TrackedJob | undefined): void {
    const attempt = job && slotHolder(job.state);
    if (attempt && gangSize(attempt) > 1) {
      this.#live.set(event.aggregateId, attempt);
      return;
    }
    const ended = this.#live.get(event.aggregateId);
    if (!ended) return;
    this.#live.delete(event.aggregateId);
    // Every member exited 0: none runs any more.
    if (event.type === 'JobSucceeded') return;
    this.#stop(event.aggregateId, ended);
  }

  /**
   * A takeover: the live gangs, and the members of a gang's last attempt that ended (while no
   * leader was there to stop them, maybe) told again to stop.
   */
  caughtUp(jobs: Iterable<TrackedJob>): void {
    for (const job of jobs) {
      const attempt = job.state.attempts.at(-1);
      if (!attempt || gangSize(attempt) === 1) continue;
      if (slotHolder(job.state) === attempt) this.#live.set(job.state.id, attempt);
      else if (attempt.status !== 'succeeded') this.#stop(job.state.id, attempt);
    }
  }

  #stop(jobId: string, attempt: AttemptState): void {
    this.deps.stop(jobId, attempt).catch((err: unknown) => {
      this.deps.log.warn({ err, jobId, attemptId: attempt.id }, "could not stop a gang's members");
    });
  }
}
