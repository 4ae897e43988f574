import {
  awaitsSharding,
  endsJob,
  isTerminal,
  outcomeOf,
  shardId,
  shardIds,
  shardSubmission,
  type ClusterState,
  type JobCommand,
} from '@trainyard/domain';
import type { JobEvent, JobStatus, StoredEvent } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';
import { pause, type Clock } from './clock.ts';

/** How many recent shard ends are kept, so that an array job's end reads none of them again. */
const ENDS_KEPT = 10_000;
/** How many shards are submitted at once. */
const SUBMITTING = 8;
/** The first pause before an array job is looked at again after a failure; it doubles. */
const AGAIN_MS = 1_000;
const AGAIN_MAX_MS = 30_000;

/** What the shards work with, passed in so that a test needs no NATS. */
export interface ShardDeps {
  /** The cluster state as folded from the log so far. */
  state: () => ClusterState;
  /** How a job that is not in the cluster state (it ended) stands in the log. */
  statusOf: (jobId: string) => Promise<JobStatus | 'none'>;
  /** Runs a command on a job; one the job refuses (a `DomainError`) is not an error. */
  command: (jobId: string, command: JobCommand) => Promise<void>;
  log: Pick<Logger, 'info' | 'warn'>;
  /** The end of the term: nothing is looked at again after it aborts. */
  signal: AbortSignal;
  clock: Clock;
}

/** The array job a shard's id names, if it names one. */
const arrayOf = (id: string): string | null => /^(job_[^_]+)_\d+$/.exec(id)?.[1] ?? null;

/**
 * Array jobs, for one term: submits the shards of each array job once it is ready, ends it once
 * its shards have all ended, gives its shards the priority it is given, and cancels the shards
 * of an array job that was cancelled (a shard never outlives its array job).
 */
export class Shards {
  /** The live array jobs, and how many shards each has. */
  readonly #arrays = new Map<string, number>();
  /** How the shards that ended lately ended, the oldest first. */
  readonly #ended = new Map<string, JobStatus>();
  /** The array jobs being looked at now: one look at a time each. */
  readonly #busy = new Set<string>();
  /** The array jobs to look at again once the look at them now is done. */
  readonly #stale = new Set<string>();

  constructor(private readonly deps: ShardDeps) {}

  /** Once caught up: every array job and every shard is looked at. */
  caughtUp(): void {
    for (const { state } of this.deps.state().jobs.values()) {
      if (state.spec?.shards !== undefined) this.#arrays.set(state.id, state.spec.shards);
    }
    for (const { state } of this.deps.state().jobs.values()) {
      if (this.#arrays.has(state.id)) this.#look(state.id);
      else if (state.shardOf && !this.#arrays.has(state.shardOf.jobId)) this.#cancel(state.id);
    }
  }

  /** An event read live, already folded. */
  live(event: StoredEvent): void {
    if (event.aggregate !== 'job') return;
    const id = event.aggregateId;
    const job = event as StoredEvent<JobEvent>;
    if (job.type === 'JobSubmitted') {
      const { spec, shardOf } = job.data;
      if (spec.shards !== undefined) this.#arrays.set(id, spec.shards);
      if (shardOf && !this.#arrays.has(shardOf.jobId)) this.#cancel(id);
    }
    if (this.#arrays.has(id)) {
      if (endsJob(job)) this.#arrayEnded(id);
      else this.#look(id);
      if (job.type === 'JobPriorityChanged') this.#prioritize(id);
      return;
    }
    const array = arrayOf(id);
    if (array && this.#arrays.has(array) && endsJob(job)) {
      this.#ended.set(id, outcomeOf(job));
      if (this.#ended.size > ENDS_KEPT) this.#ended.delete(this.#ended.keys().next().value!);
      this.#look(array);
    }
  }

  /** An array job ended: what of it still runs was cancelled with it. */
  #arrayEnded(id: string): void {
    const count = this.#arrays.get(id)!;
    this.#arrays.delete(id);
    const jobs = this.deps.state().jobs;
    for (let i = 0; i < count; i++) if (jobs.has(shardId(id, i))) this.#cancel(shardId(id, i));
  }

  #cancel(id: string): void {
    this.deps.log.info({ jobId: id }, 'cancelling a shard of an array job that ended');
    this.#again(() => this.deps.command(id, { type: 'CancelJob' }), id);
  }

  /**
   * The array job's priority changed: so does that of each shard that still waits or runs (a
   * shard's own may be changed after).
   */
  #prioritize(id: string): void {
    const shards = Array.from({ length: this.#arrays.get(id)! }, (_, i) => shardId(id, i));
    this.#again(async () => {
      const priority = this.deps.state().jobs.get(id)?.state.spec?.priority;
      if (priority === undefined) return;
      for (const shard of shards) {
        const live = this.deps.state().jobs.get(shard)?.state;
        if (live && live.spec!.priority !== priority)
          await this.deps.command(shard, { type: 'ChangePriority', priority });
      }
    }, id);
  }

  /** Looks at one array job, one look at a time, again after a failure. */
  #look(id: string): void {
    if (this.#busy.has(id)) {
      this.#stale.add(id);
      return;
    }
    this.#busy.add(id);
    this.#again(
      () => this.#settle(id),
      id,
      () => {
        this.#busy.delete(id);
        if (this.#stale.delete(id) && !this.deps.signal.aborted) this.#look(id);
      },
    );
  }

  #again(work: () => Promise<void>, id: string, done?: () => void, waitMs = AGAIN_MS): void {
    work().then(done, async (err: unknown) => {
      this.deps.log.warn({ err, jobId: id }, 'could not look at an array job');
      await pause(this.deps.clock, waitMs, this.deps.signal);
      if (this.deps.signal.aborted) done?.();
      else this.#again(work, id, done, Math.min(waitMs * 2, AGAIN_MAX_MS));
    });
  }

  async #settle(id: string): Promise<void> {
    const cluster = this.deps.state();
    const job = cluster.jobs.get(id);
    if (!job || isTerminal(job.state.status)) return;
    if (awaitsSharding(job.state)) {
      await this.#submitShards(id);
      if (!this.deps.signal.aborted) await this.deps.command(id, { type: 'RecordSharded' });
      return;
    }
    const state = job.state;
    if (state.shardCount === 0) return;
    const ids = shardIds(state);
    if (ids.some((shard) => cluster.jobs.has(shard))) return;
    const outcomes: Record<string, JobStatus | 'none'> = {};
    for (const shard of ids)
      outcomes[shard] = this.#ended.get(shard) ?? (await this.deps.statusOf(shard));
    await this.deps.command(id, { type: 'FinishShards', outcomes });
  }

  /** Submits every shard the array job does not have yet, a few at a time. */
  async #submitShards(id: string): Promise<void> {
    const job = this.deps.state().jobs.get(id)!;
    const count = job.state.spec!.shards!;
    let next = 0;
    const submitOne = async (): Promise<void> => {
      while (next < count && !this.deps.signal.aborted) {
        const index = next++;
        const current = this.deps.state().jobs.get(id);
        if (!current || !awaitsSharding(current.state)) return;
        if (this.deps.state().jobs.has(shardId(id, index))) continue;
        await this.deps.command(shardId(id, index), {
          type: 'SubmitJob',
          ...shardSubmission(current.state, index),
        });
      }
    };
    await Promise.all(Array.from({ length: Math.min(SUBMITTING, count) }, submitOne));
    this.deps.log.info({ jobId: id, shards: count }, 'array job’s shards submitted');
  }
}
