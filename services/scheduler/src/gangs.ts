import { gangSize, slotHolder, type AttemptState, type TrackedJob } from '@trainyard/domain';
import type { StoredEvent } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';

/** What the gangs work with, passed in so that a test needs no NATS. */
export interface GangDeps {
  /** Tells the worker of each member of the attempt to stop it, for the event at `seq`. */
  stop: (jobId: string, attempt: AttemptState, seq: number) => Promise<void>;
  log: Pick<Logger, 'warn'>;
}

/**
 * Gang jobs' live attempts, for one term. When a member fails (or its worker stopped it past the
 * time limit), every member's worker is told to stop its part (the attempt ends once they all
 * have); and when an attempt ends but by every member exiting 0 by itself (the acceptance time
 * may have given up on members that did not answer), again.
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
      const breaks =
        event.type === 'JobMemberEnded' && (event.data.failure || event.data.timeLimited);
      if (breaks) this.#stop(event.aggregateId, attempt, event.seq);
      return;
    }
    const ended = this.#live.get(event.aggregateId);
    if (!ended) return;
    this.#live.delete(event.aggregateId);
    if (event.type !== 'JobSucceeded' || ended.brokenAt !== null)
      this.#stop(event.aggregateId, ended, event.seq);
  }

  /** A takeover: the live gangs, and the stops of those whose members are being stopped, again. */
  caughtUp(jobs: Iterable<TrackedJob>): void {
    for (const job of jobs) {
      const attempt = slotHolder(job.state);
      if (!attempt || gangSize(attempt) === 1) continue;
      this.#live.set(job.state.id, attempt);
      if (attempt.brokenAt !== null) this.#stop(job.state.id, attempt, job.head.seq);
    }
  }

  #stop(jobId: string, attempt: AttemptState, seq: number): void {
    this.deps.stop(jobId, attempt, seq).catch((err: unknown) => {
      this.deps.log.warn({ err, jobId, attemptId: attempt.id }, "could not stop a gang's members");
    });
  }
}
