import {
  DEFAULT_POLICY,
  DomainError,
  emptyCluster,
  evolveCluster,
  plan,
  type Assignment,
  type ClusterState,
  type PlacementPolicy,
} from '@trainyard/domain';
import { retry, type StoredEvent } from '@trainyard/events';
import { runJobCommand } from '@trainyard/application';
import {
  KvLease,
  newId,
  sleep,
  followLog,
  onAbort,
  type ServiceContext,
} from '@trainyard/service-kit';
import { dispatchRun, dispatchStop } from './dispatch.ts';
import { react, recover } from './reactions.ts';
import { loadSnapshot, saveSnapshot } from './snapshot.ts';

export interface SchedulerOptions {
  leaseTtlMs: number;
  policy: PlacementPolicy;
  /** A snapshot of the cluster state is written after this many events. */
  snapshotEveryEvents: number;
}

export const DEFAULT_SCHEDULER_OPTIONS: SchedulerOptions = {
  leaseTtlMs: 10_000,
  policy: DEFAULT_POLICY,
  snapshotEveryEvents: 10_000,
};

/**
 * How long a stopping scheduler gives its last snapshot. The snapshot only saves the next leader
 * some replay, and a store that is away would otherwise hold the stop for the full deadline.
 */
const FINAL_SNAPSHOT_DEADLINE_MS = 3_000;
/** The pause after a failed round before the log is read again, the first of a growing few. */
const RESYNC_MS = 500;

/**
 * One term as leader: starts from the latest snapshot, folds the rest of the log into the
 * cluster state, then places jobs whenever it has caught up. It waits for its own assignments
 * to come back through the log before planning again, so the state it plans on always includes
 * them.
 */
class Term {
  cluster: ClusterState = emptyCluster();
  startSeq = 0;
  #snapshotSeq = 0;
  #snapshotting = false;
  #caughtUp = false;

  /** Whether the term has folded the log up to its end and places jobs. */
  get isCaughtUp(): boolean {
    return this.#caughtUp && !this.signal.aborted;
  }
  #planning = false;
  #again = false;
  #awaitSeq = 0;
  #wakeTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: ServiceContext,
    private readonly opts: SchedulerOptions,
    private readonly signal: AbortSignal,
  ) {}

  async run(): Promise<void> {
    const started = Date.now();
    this.cluster = (await loadSnapshot(this.ctx)) ?? emptyCluster();
    this.#snapshotSeq = this.cluster.lastSeq;
    this.startSeq = this.cluster.lastSeq + 1;
    this.ctx.log.info(
      { fromSeq: this.cluster.lastSeq + 1, ms: Date.now() - started },
      'scheduler state loaded',
    );
    if (!(await this.ctx.bus.store.hasAfter(this.cluster.lastSeq))) this.#onCaughtUp();
    try {
      while (!this.signal.aborted) await this.#follow();
    } finally {
      clearTimeout(this.#wakeTimer);
      clearImmediate(this.#soon);
    }
    if (this.#caughtUp && this.cluster.lastSeq > this.#snapshotSeq && !this.#snapshotting) {
      await saveSnapshot(this.ctx, this.cluster, FINAL_SNAPSHOT_DEADLINE_MS).catch((err: unknown) =>
        this.ctx.log.warn({ err }, 'final scheduler snapshot failed'),
      );
    }
  }

  /** Reads the log into the cluster state until the term ends or the reader stalls. */
  async #follow(): Promise<void> {
    await followLog(
      this.ctx.bus.store,
      {
        fromSeq: this.cluster.lastSeq + 1,
        maxMessages: 4096,
        signal: this.signal,
        onStall: (read) =>
          this.ctx.log.warn({ read }, 'scheduler reader stalled; starting it again'),
        onMiscount: (read) =>
          this.ctx.log.warn({ read }, 'scheduler reader miscounted; starting it again'),
        onCaughtUp: () => {
          if (!this.#caughtUp) this.#onCaughtUp();
          else this.#scheduleSoon();
        },
      },
      (event) => {
        evolveCluster(this.cluster, event);
        if (this.#caughtUp) this.#react(event);
        if (this.cluster.lastSeq - this.#snapshotSeq >= this.opts.snapshotEveryEvents)
          this.#snapshot();
      },
    );
  }

  #snapshot(): void {
    if (this.#snapshotting) return;
    this.#snapshotting = true;
    const seq = this.cluster.lastSeq;
    saveSnapshot(this.ctx, this.cluster)
      .then(() => (this.#snapshotSeq = seq))
      .catch((err: unknown) => this.ctx.log.warn({ err }, 'scheduler snapshot failed'))
      .finally(() => (this.#snapshotting = false));
  }

  #onCaughtUp(): void {
    this.#caughtUp = true;
    this.ctx.log.info(
      { seq: this.cluster.lastSeq, jobs: this.cluster.jobs.size },
      'scheduler caught up',
    );
    for (const job of this.cluster.jobs.values()) {
      if (job.state.status === 'assigned' && !job.state.cancelRequested)
        this.#send(dispatchRun(this.ctx, job));
      if (job.state.cancelRequested) this.#send(dispatchStop(this.ctx.bus.js, job));
    }
    this.#send(recover(this.ctx, this.cluster));
    this.schedule();
  }

  #react(event: StoredEvent): void {
    const effect = react(this.ctx, this.cluster, event);
    if (effect) this.#send(effect);
  }

  #send(p: Promise<void>): void {
    p.catch((err: unknown) => this.ctx.log.warn({ err }, 'scheduler side effect failed'));
  }

  #soon: NodeJS.Immediate | undefined;

  /** Coalesces the many wake-ups of a busy log into one round per turn of the event loop. */
  #scheduleSoon(): void {
    this.#soon ??= setImmediate(() => {
      this.#soon = undefined;
      this.schedule();
    });
  }

  /** Plans and assigns, unless a round is running or our last assignments are not back yet. */
  schedule(): void {
    if (!this.#caughtUp || this.signal.aborted) return;
    if (this.#planning || this.cluster.lastSeq < this.#awaitSeq) {
      this.#again = true;
      return;
    }
    this.#planning = true;
    this.#again = false;
    this.#round()
      .catch(async (err: unknown) => {
        this.ctx.log.error({ err }, 'scheduling round failed; planning again after the log');
        await this.#resync();
      })
      .finally(() => {
        this.#planning = false;
        if (this.#again) this.schedule();
      });
  }

  async #round(): Promise<void> {
    const now = new Date();
    const { assignments, wakeAt } = plan(this.cluster, now, this.opts.policy);
    this.#armWake(wakeAt, now);
    if (assignments.length === 0) return;
    const results = await Promise.allSettled(assignments.map((a) => this.#assign(a, now)));
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
    await sleep(RESYNC_MS, this.signal);
    if (this.signal.aborted) return;
    await retry(
      async () => {
        this.#awaitSeq = Math.max(this.#awaitSeq, await this.ctx.bus.store.lastSeq());
        this.#again = true;
      },
      {
        attempts: Infinity,
        baseMs: RESYNC_MS,
        maxMs: 5_000,
        signal: this.signal,
        onRetry: (err) => this.ctx.log.warn({ err }, 'cannot read the log; scheduling waits'),
      },
    ).catch(() => undefined);
  }

  async #assign(a: Assignment, now: Date): Promise<number> {
    const tracked = this.cluster.jobs.get(a.jobId);
    if (!tracked) return 0;
    try {
      const result = await runJobCommand(
        this.ctx.bus.store,
        a.jobId,
        {
          type: 'AssignJob',
          attemptId: newId('att'),
          workerId: a.workerId,
          gpus: a.gpus,
          vramBytes: a.vramBytes,
          cpus: a.cpus,
        },
        { actor: { kind: 'service', id: this.ctx.instanceId }, now },
        { snapshot: { state: tracked.state, head: tracked.head } },
      );
      if (result.state.status === 'assigned') this.#send(dispatchRun(this.ctx, result));
      return result.head.seq;
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
      this.ctx.log.debug({ jobId: a.jobId, code: err.code }, 'assignment no longer applies');
      return 0;
    }
  }

  #armWake(wakeAt: Date | null, now: Date): void {
    clearTimeout(this.#wakeTimer);
    if (!wakeAt) return;
    this.#wakeTimer = setTimeout(
      () => this.schedule(),
      Math.max(0, wakeAt.getTime() - now.getTime()) + 5,
    );
  }
}

export interface RunningScheduler {
  isLeader(): boolean;
  /** The sequence the current (or last) term started folding from: 1 without a snapshot. */
  termStartSeq(): number;
  /** Resolves once this scheduler leads and has caught up with the log. */
  ready(): Promise<void>;
  stop(): Promise<void>;
}

/** Runs for leadership and, while it holds the lease, schedules. */
export async function startScheduler(
  ctx: ServiceContext,
  opts: SchedulerOptions = DEFAULT_SCHEDULER_OPTIONS,
): Promise<RunningScheduler> {
  const lease = await KvLease.open(
    ctx.bus.js,
    'scheduler',
    ctx.instanceId,
    opts.leaseTtlMs,
    ctx.config.TRAINYARD_STREAM_REPLICAS,
  );
  const stopping = new AbortController();
  const renewMs = Math.max(100, Math.floor(opts.leaseTtlMs / 3));
  const log = ctx.log.child({ component: 'scheduler' });

  let current: Term | null = null;

  async function lead(): Promise<void> {
    const term = new AbortController();
    const forgetStop = onAbort(stopping.signal, () => term.abort());
    const renew = setInterval(() => {
      if (term.signal.aborted) return clearInterval(renew);
      void lease.tryAcquire().then((held) => {
        if (!held && !term.signal.aborted) {
          log.warn('lost the scheduler lease');
          term.abort();
        }
      });
    }, renewMs);
    try {
      current = new Term(ctx, opts, term.signal);
      await current.run();
    } finally {
      clearInterval(renew);
      forgetStop();
    }
  }

  async function campaign(): Promise<void> {
    while (!stopping.signal.aborted) {
      if (await lease.tryAcquire()) {
        log.info('leading');
        await lead().catch((err: unknown) => log.error({ err }, 'term ended with an error'));
        await lease.release();
      }
      await sleep(renewMs, stopping.signal);
    }
  }

  const done = campaign();
  return {
    isLeader: () => lease.held,
    termStartSeq: () => current?.startSeq ?? 0,
    ready: async () => {
      while (!stopping.signal.aborted && !(lease.held && current?.isCaughtUp))
        await sleep(20, stopping.signal);
    },
    stop: async () => {
      stopping.abort();
      await done;
      await lease.release();
    },
  };
}
