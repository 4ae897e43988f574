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

/**
 * Array jobs, for one term: submits the shards of each array job once it is ready, ends it once
 * its shards have all ended, keeps its shards at the priority it has, and cancels the shards
 * of an array job that was cancelled (a shard never outlives its array job).
 */
export class Shards {
  /** The live array jobs, and how many shards each has. */
  readonly #arrays = new Map<string, number>();
  /** The live shards, and the array job of each. */
  readonly #shards = new Map<string, string>();
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
      else if (state.shardOf) this.#shardSubmitted(state.id, state.shardOf.jobId);
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
      if (shardOf) this.#shardSubmitted(id, shardOf.jobId);
    }
    if (this.#arrays.has(id)) {
      if (endsJob(job)) this.#arrayEnded(id);
      else this.#look(id);
      return;
    }
    const array = this.#shards.get(id);
    if (array !== undefined && endsJob(job)) {
      this.#shards.delete(id);
      this.#ended.set(id, outcomeOf(job));
      if (this.#ended.size > ENDS_KEPT) this.#ended.delete(this.#ended.keys().next().value!);
      this.#look(array);
    }
  }

  /** A shard is in the log: one whose array job ended (it was cancelled) is cancelled too. */
  #shardSubmitted(id: string, array: string): void {
    if (this.#arrays.has(array)) this.#shards.set(id, array);
    else this.#cancel(id);
  }

  /** An array job ended: what of it still runs was cancelled with it. */
  #arrayEnded(id: string): void {
    const count = this.#arrays.get(id)!;
    this.#arrays.delete(id);
    const jobs = this.deps.state().jobs;
    for (let i = 0; i < count; i++) {
      const shard = shardId(id, i);
      this.#shards.delete(shard);
      if (jobs.has(shard)) this.#cancel(shard);
    }
  }

  #cancel(id: string): void {
    this.deps.log.info({ jobId: id }, 'cancelling a shard of an array job that ended');
    this.#again(() => this.deps.command(id, { type: 'CancelJob' }), id);
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
    // A shard takes its array job's priority (the API changes no shard's own).
    for (const shard of ids) {
      const live = this.deps.state().jobs.get(shard)?.state;
      const priority = this.deps.state().jobs.get(id)?.state.spec?.priority;
      if (this.deps.signal.aborted || priority === undefined) return;
      if (live && live.spec!.priority !== priority)
        await this.deps.command(shard, { type: 'ChangePriority', priority });
    }
    if (ids.some((shard) => cluster.jobs.has(shard))) return;
    const outcomes: Record<string, JobStatus | 'none'> = {};
    for (const shard of ids)
      outcomes[shard] = this.#ended.get(shard) ?? (await this.deps.statusOf(shard));
    const missing = ids.flatMap((shard, index) => (outcomes[shard] === 'none' ? [index] : []));
    // Each shard is submitted before the array job is recorded sharded: submit any the log lacks.
    for (const index of missing) {
      // The array job may have been cancelled while its shards were read: none is submitted then.
      if (!this.deps.state().jobs.has(id)) return;
      await this.deps.command(shardId(id, index), {
        type: 'SubmitJob',
        ...shardSubmission(state, index),
      });
    }
    if (missing.length === 0) await this.deps.command(id, { type: 'FinishShards', outcomes });
  }

  /** Submits every shard the array job does not have yet, a few at a time. */
  async #submitShards(id: string): Promise<void> {
    const job = this.deps.state().jobs.get(id)!;
    const count = job.state.spec!.shards!;
    let next = 0;
    const submitOne = async (): Promise<void> => {
      while (next < count && !this.deps.signal.aborted) {
        const current = this.deps.state().jobs.get(id);
        if (!current || !awaitsSharding(current.state)) return;
        const index = next++;
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
