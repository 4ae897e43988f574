import {
  awaitsDependencies,
  endsJob,
  isTerminal,
  outcomeOf,
  type ClusterState,
  type JobState,
} from '@trainyard/domain';
import type { JobEvent, JobStatus, StoredEvent } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';
import { pause, type Clock } from './clock.ts';

/** How many recent ends are kept, so that the jobs waiting on one read none of them again. */
const ENDS_KEPT = 10_000;

/** The first pause before a job's dependencies are looked at again after a failure; it doubles. */
const AGAIN_MS = 1_000;
const AGAIN_MAX_MS = 30_000;

/** What the dependencies work with, passed in so that a test needs no NATS. */
export interface DependencyDeps {
  /** The cluster state as folded from the log so far. */
  state: () => ClusterState;
  /** How a job that is not in the cluster state (it ended) stands in the log. */
  statusOf: (jobId: string) => Promise<JobStatus | 'none'>;
  /** Records how a job's dependencies stand (`ResolveDependencies`). */
  resolve: (jobId: string, outcomes: Record<string, JobStatus | 'none'>) => Promise<void>;
  log: Pick<Logger, 'warn'>;
  /** The end of the term: nothing is looked at again after it aborts. */
  signal: AbortSignal;
  clock: Clock;
}

/**
 * Dependencies, for one term: which waiting jobs depend on which, so that when a job ends the
 * jobs waiting on it are looked at, and each is recorded as free to be placed
 * (`JobDependenciesMet`) once all it depends on succeeded, or failed (`JobDependencyFailed`) as
 * soon as one of them failed or was cancelled.
 */
export class Dependencies {
  /** Each job waited on, and the jobs that wait on it. */
  readonly #waiters = new Map<string, Set<string>>();
  /** Each waiting job, and what it waits on. */
  readonly #waiting = new Map<string, readonly string[]>();
  /** How the jobs that ended lately ended, the oldest first. */
  readonly #ended = new Map<string, JobStatus>();

  constructor(private readonly deps: DependencyDeps) {}

  /** Once caught up: every job that waits is indexed and looked at. */
  caughtUp(): void {
    for (const job of this.deps.state().jobs.values()) this.#track(job.state);
  }

  /** An event read live, already folded. */
  live(event: StoredEvent): void {
    if (event.aggregate !== 'job') return;
    const type = event.type as JobEvent['type'];
    const id = event.aggregateId;
    if (type === 'JobSubmitted') {
      const job = this.deps.state().jobs.get(id);
      if (job) this.#track(job.state);
    }
    const ends = endsJob(event as StoredEvent<JobEvent>);
    if (type === 'JobDependenciesMet' || ends) this.#untrack(id);
    if (ends && this.#waiters.has(id)) {
      this.#ended.set(id, outcomeOf(event as StoredEvent<JobEvent>));
      if (this.#ended.size > ENDS_KEPT) this.#ended.delete(this.#ended.keys().next().value!);
      for (const waiter of this.#waiters.get(id)!) this.#look(waiter);
    }
  }

  /** How many jobs wait on others (for tests and logs). */
  get waiting(): number {
    return this.#waiting.size;
  }

  #track(state: JobState): void {
    if (!awaitsDependencies(state) || this.#waiting.has(state.id)) return;
    const on = state.spec?.dependsOn ?? [];
    this.#waiting.set(state.id, on);
    for (const dependency of on) {
      let waiters = this.#waiters.get(dependency);
      if (!waiters) this.#waiters.set(dependency, (waiters = new Set()));
      waiters.add(state.id);
    }
    this.#look(state.id);
  }

  #untrack(id: string): void {
    for (const dependency of this.#waiting.get(id) ?? []) {
      const waiters = this.#waiters.get(dependency);
      waiters?.delete(id);
      if (waiters?.size === 0) this.#waiters.delete(dependency);
    }
    this.#waiting.delete(id);
  }

  /** Looks at one waiting job, again after a pause that grows while the log cannot be read. */
  #look(id: string, waitMs = AGAIN_MS): void {
    this.#settle(id).catch(async (err: unknown) => {
      this.deps.log.warn({ err, jobId: id }, 'could not look at a job’s dependencies');
      await pause(this.deps.clock, waitMs, this.deps.signal);
      if (!this.deps.signal.aborted && this.#waiting.has(id))
        this.#look(id, Math.min(waitMs * 2, AGAIN_MAX_MS));
    });
  }

  async #settle(id: string): Promise<void> {
    const cluster = this.deps.state();
    const job = cluster.jobs.get(id);
    if (!job || !awaitsDependencies(job.state)) return;
    const outcomes: Record<string, JobStatus | 'none'> = {};
    for (const dependency of this.#waiting.get(id) ?? []) {
      // A job the state holds has not ended; one it does not hold has, and the log says how.
      const known = cluster.jobs.get(dependency)?.state.status ?? this.#ended.get(dependency);
      outcomes[dependency] = known ?? (await this.deps.statusOf(dependency));
    }
    if (Object.values(outcomes).some((status) => status === 'none' || isTerminal(status)))
      await this.deps.resolve(id, outcomes);
  }
}
