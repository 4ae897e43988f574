import {
  currentAttempt,
  DomainError,
  gangDeadline,
  liveOnWorker,
  masterPortFor,
  servicePortCount,
  servicePortsFor,
  timeLimitDeadline,
  type Assignment,
  type JobCommand,
  type Preemption,
} from '@trainyard/domain';
import type { StoredEvent } from '@trainyard/events';
import { loadJob, runJobCommand } from '@trainyard/application';
import { newId, type ServiceContext } from '@trainyard/service-kit';
import { realClock, type Clock } from './clock.ts';
import { dispatchRun, dispatchStop, stopMembers, type AddressOf } from './dispatch.ts';
import { Deadlines } from './deadlines.ts';
import { Gangs } from './gangs.ts';
import { Folding } from './folding.ts';
import type { SchedulerOptions } from './options.ts';
import { react, recover } from './reactions.ts';
import { Rounds } from './rounds.ts';
import { assignSession, dispatchSessionRun, dispatchSessionStop } from './sessions.ts';
import { Dependencies } from './dependencies.ts';
import { Shards } from './shards.ts';
import { serveQueue, type QueueService } from './queue-service.ts';

/**
 * One term as leader: folds the log into the cluster state and, once it has caught up, sends
 * workers what the log gives them, fails what lost workers held, and places jobs in rounds.
 */
export class Term {
  readonly #folding: Folding;
  readonly #rounds: Rounds;
  readonly #timeLimits: Deadlines;
  /**
   * Gangs' attempts whose members have not all started, or not all ended once told to stop:
   * given up on past the acceptance time.
   */
  readonly #gangStarts: Deadlines;
  readonly #gangs: Gangs;
  /** Ports chosen for gangs' rank 0 by worker, while their assignments are on their way. */
  readonly #portsChosen = new Map<string, Set<number>>();
  readonly #dependencies: Dependencies;
  readonly #shards: Shards;
  #queue: QueueService | undefined;

  constructor(
    private readonly ctx: ServiceContext,
    private readonly opts: SchedulerOptions,
    signal: AbortSignal,
    clock: Clock = realClock,
  ) {
    this.#folding = new Folding(ctx, opts.snapshotEveryEvents, signal, {
      caughtUp: () => this.#onCaughtUp(),
      atEnd: () => this.#rounds.wakeSoon(),
      live: (event) => this.#react(event),
    });
    this.#rounds = new Rounds({
      state: () => this.#folding.cluster,
      policy: opts.policy,
      assign: (a, now) => this.#assign(a, now),
      preempt: (p, now) => this.#preempt(p, now),
      lastSeq: () => ctx.bus.store.lastSeq(),
      log: ctx.log,
      signal,
      clock,
    });
    this.#timeLimits = new Deadlines({
      jobs: () => this.#folding.cluster.jobs.values(),
      deadline: (job) => timeLimitDeadline(job.state),
      enforce: (job, now) => this.#command(job.state.id, { type: 'EnforceTimeLimit', now }, now),
      what: 'stop a job at its time limit',
      log: ctx.log,
      signal,
      clock,
    });
    const acceptMs = ctx.config.TRAINYARD_GANG_ACCEPT_S * 1000;
    this.#gangStarts = new Deadlines({
      jobs: () => this.#folding.cluster.jobs.values(),
      deadline: (job) => gangDeadline(job.state, acceptMs),
      enforce: (job, now) =>
        this.#command(
          job.state.id,
          {
            type: 'AbandonGang',
            attemptId: currentAttempt(job.state)!.id,
            now,
            acceptMs,
            jitter: Math.random(),
          },
          now,
        ),
      what: "give up on a gang's attempt whose members did not all start or stop",
      log: ctx.log,
      signal,
      clock,
    });
    this.#gangs = new Gangs({
      stop: (jobId, attempt, seq) => stopMembers(ctx.bus.js, jobId, attempt, seq),
      log: ctx.log,
    });
    this.#dependencies = new Dependencies({
      state: () => this.#folding.cluster,
      statusOf: async (id) => (await loadJob(ctx.bus.store, id)).state.status,
      resolve: (id, outcomes) => this.#command(id, { type: 'ResolveDependencies', outcomes }),
      log: ctx.log,
      signal,
      clock,
    });
    this.#shards = new Shards({
      state: () => this.#folding.cluster,
      statusOf: async (id) => (await loadJob(ctx.bus.store, id)).state.status,
      command: (id, command) => this.#command(id, command),
      log: ctx.log,
      signal,
      clock,
    });
  }

  /** The sequence the term started folding from: 1 without a snapshot, 0 before it loaded. */
  get startSeq(): number {
    return this.#folding.startSeq;
  }

  /** Whether the term has folded the log up to its end and places jobs. */
  get isCaughtUp(): boolean {
    return this.#folding.isCaughtUp;
  }

  /** Runs until the term's signal aborts, then leaves a snapshot for the next leader. */
  async run(): Promise<void> {
    await this.#folding.load();
    try {
      await this.#folding.follow();
    } finally {
      this.#rounds.stop();
      this.#timeLimits.stop();
      this.#gangStarts.stop();
      this.#queue?.stop();
    }
    await this.#folding.finish();
  }

  /** A takeover: resends what the last leader may not have, then plans. */
  #onCaughtUp(): void {
    const cluster = this.#folding.cluster;
    for (const job of cluster.jobs.values()) {
      const { cancelRequested, timeLimitReached, preemptRequested } = job.state;
      const attempt = currentAttempt(job.state);
      // A gang whose members are being stopped starts none of those that did not start.
      const resend = attempt?.status === 'assigned' && attempt.brokenAt === null;
      if (resend && !cancelRequested && !preemptRequested)
        this.#send(dispatchRun(this.ctx, job, this.#addressOf));
      if (cancelRequested || timeLimitReached || preemptRequested)
        this.#send(dispatchStop(this.ctx.bus.js, job));
    }
    for (const session of cluster.sessions.values()) {
      this.#send(dispatchSessionRun(this.ctx.bus.js, session));
      this.#send(dispatchSessionStop(this.ctx.bus.js, session));
    }
    this.#send(recover(this.ctx, cluster));
    this.#timeLimits.check();
    this.#gangStarts.check();
    this.#gangs.caughtUp(cluster.jobs.values());
    this.#dependencies.caughtUp();
    this.#shards.caughtUp();
    this.#queue = serveQueue(this.ctx, () => this.#folding.cluster, this.opts.policy);
    this.#rounds.wake();
  }

  #react(event: StoredEvent): void {
    const effect = react(this.ctx, this.#folding.cluster, event);
    if (effect) this.#send(effect);
    this.#dependencies.live(event);
    this.#shards.live(event);
    if (event.aggregate !== 'job') return;
    const job = this.#folding.cluster.jobs.get(event.aggregateId);
    this.#gangs.folded(event, job);
    if (job && event.type === 'JobStarted') this.#timeLimits.watch(job);
    if (job) this.#gangStarts.watch(job);
  }

  /** Where other workers reach a worker: its registered address, else its id. */
  readonly #addressOf: AddressOf = (workerId) =>
    this.#folding.cluster.workers.get(workerId)?.address ?? workerId;

  /**
   * Runs a command on a job as the scheduler (the job as folded, else as the log has it); one the
   * job refuses no longer applies, and is not an error.
   */
  async #command(id: string, command: JobCommand, now = new Date()): Promise<void> {
    const job = this.#folding.cluster.jobs.get(id);
    try {
      const { events } = await runJobCommand(
        this.ctx.bus.store,
        id,
        command,
        { actor: { kind: 'service', id: this.ctx.instanceId }, now },
        job && { snapshot: { state: job.state, head: job.head } },
      );
      if (events.length > 0) this.ctx.log.info({ jobId: id, event: events[0]!.type }, command.type);
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
      this.ctx.log.debug({ jobId: id, code: err.code }, `${command.type} no longer applies`);
    }
  }

  #send(p: Promise<void>): void {
    p.catch((err: unknown) => this.ctx.log.warn({ err }, 'scheduler side effect failed'));
  }

  /** Appends and dispatches an assignment: the sequence it landed at, 0 if it no longer applies. */
  async #assign(a: Assignment, now: Date): Promise<number> {
    if (a.kind === 'session') return assignSession(this.ctx, this.#folding.cluster, a, now);
    const tracked = this.#folding.cluster.jobs.get(a.id);
    if (!tracked) return 0;
    const attemptId = newId('att');
    // The ports of the gangs this round assigns on the same worker, which the state has yet to
    // hold: every assignment of a round chooses its port before any of them lands.
    const chosen = this.#portsChosen.get(a.workerId) ?? new Set<number>();
    const count = servicePortCount(tracked.state.spec);
    const live = a.members || count > 0 ? liveOnWorker(this.#folding.cluster, a.workerId) : [];
    const port = a.members ? masterPortFor(live, a.workerId, attemptId, chosen) : undefined;
    const ports =
      count > 0 ? servicePortsFor(live, a.workerId, attemptId, count, chosen) : undefined;
    const mine = [...(port === undefined ? [] : [port]), ...(ports ?? [])];
    for (const p of mine) chosen.add(p);
    this.#portsChosen.set(a.workerId, chosen);
    try {
      const result = await runJobCommand(
        this.ctx.bus.store,
        a.id,
        {
          type: 'AssignJob',
          attemptId,
          workerId: a.workerId,
          gpus: a.gpus,
          vramBytes: a.vramBytes,
          cpus: a.cpus,
          ...(a.members && { members: a.members, masterPort: port }),
          ...(ports && { ports }),
        },
        { actor: { kind: 'service', id: this.ctx.instanceId }, now },
        { snapshot: { state: tracked.state, head: tracked.head } },
      );
      if (currentAttempt(result.state)?.status === 'assigned')
        this.#send(dispatchRun(this.ctx, result, this.#addressOf));
      return result.head.seq;
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
      this.ctx.log.debug({ jobId: a.id, code: err.code }, 'assignment no longer applies');
      return 0;
    } finally {
      for (const p of mine) chosen.delete(p);
    }
  }

  /** Appends a preemption (its worker is told to stop the attempt when it folds back). */
  async #preempt(p: Preemption, now: Date): Promise<number> {
    const tracked = this.#folding.cluster.jobs.get(p.jobId);
    if (!tracked) return 0;
    try {
      const result = await runJobCommand(
        this.ctx.bus.store,
        p.jobId,
        { type: 'PreemptJob', attemptId: p.attemptId, by: p.by },
        { actor: { kind: 'service', id: this.ctx.instanceId }, now },
        { snapshot: { state: tracked.state, head: tracked.head } },
      );
      this.ctx.log.info(
        { jobId: p.jobId, attemptId: p.attemptId, workerId: p.workerId, by: p.by },
        'preempting an attempt for work of a higher priority',
      );
      return result.head.seq;
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
      this.ctx.log.debug({ jobId: p.jobId, code: err.code }, 'preemption no longer applies');
      return 0;
    }
  }
}
