import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import type { Msg } from '@nats-io/nats-core';
import {
  currentAttempt,
  DomainError,
  isTerminal,
  memberOf,
  memberOnWorker,
  memberStatus,
  type JobCommand,
  type JobState,
  type WorkerCommand,
} from '@trainyard/domain';
import { EventStoreError, isTransient, retryTransient, Streams, Subjects } from '@trainyard/events';
import {
  dispatchSlots,
  loadJob,
  MAX_GPUS_PER_WORKER,
  ReportSchema,
  runJobCommand,
  runWorkerCommand,
  type AttemptReport,
  type Report,
  type JobSnapshot,
  type ReportedJob,
  type ReportReply,
  WorkerKeys,
} from '@trainyard/application';
import { supervise, type ServiceContext } from '@trainyard/service-kit';
import { serveWorkerRequests, type WorkerRequestLimits } from './requests.ts';
import { onSessionReport } from './session-reports.ts';

/** Job snapshots kept between reports, newest last. */
const CACHE_SIZE = 10_000;
/**
 * Reports answered at once: 128 in all, 32 of one worker, whose next 256 wait their turn (past
 * them it is answered `UNAVAILABLE`); one that waited past its sender's 10 s is dropped.
 */
const LIMITS: WorkerRequestLimits = {
  concurrency: 128,
  perWorker: 32,
  waiting: 256,
  staleMs: 10_000,
};
/** How often a worker may register. */
const REGISTER_EVERY_MS = 1_000;
/** The largest registration a worker may send. */
const MAX_WORKER_EVENT_BYTES = 64 * 1024;
/** How long a worker may hold a dispatch before it is delivered again (it says it is working). */
const DISPATCH_ACK_WAIT_NS = 60_000 * 1_000_000;

export interface RunningReports {
  stop(): Promise<void>;
}

/** A report that cannot be taken now: answered `UNAVAILABLE`, so that the worker sends it again. */
class Busy extends Error {}

/** A report that is refused, with the code its answer names. */
class Refused extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Where a job stands, as far as `workerId` may know: its attempt (the member of a gang's that it
 * runs) only if that worker holds it.
 */
const reportedJob = (state: JobState, workerId: string): ReportedJob => {
  const attempt = currentAttempt(state);
  const member = attempt && memberOnWorker(attempt, workerId);
  return {
    status: state.status,
    attemptId: member?.id ?? null,
    attemptStatus: member ? memberStatus(state, member.id) : null,
  };
};

/**
 * Appends what workers report, for the attempts they hold. Every control-plane replica answers
 * reports (a queue group shares them); the worker is named by the subject it reported on, which
 * only it may publish to, never by anything in the report. Each report is decided on the log as
 * it stands: a snapshot kept from an earlier report is tried first, and a refusal or a conflict
 * on it is decided again on the job read afresh, so that a refusal is never a stale one.
 */
export function startReports(ctx: ServiceContext): RunningReports {
  const log = ctx.log.child({ component: 'reports' });
  const snapshots = new Map<string, JobSnapshot>();
  /** Reports of one job (or session) are handled one at a time, in the order they came. */
  const perJob = new Map<string, Promise<unknown>>();
  const registeredAt = new Map<string, number>();
  /** Workers whose keys were revoked: nothing they report is taken. */
  const revoked = new Set<string>();
  const stopping = new AbortController();
  const keysReady = WorkerKeys.open(ctx.bus.js, ctx.config.TRAINYARD_STREAM_REPLICAS);
  const watching = supervise(
    'revoked workers',
    async () =>
      (await keysReady).watch(stopping.signal, (records) => {
        revoked.clear();
        for (const r of records) if (r.status === 'revoked') revoked.add(r.name);
      }),
    stopping.signal,
    log,
  );

  const remember = (jobId: string, snapshot: JobSnapshot) => {
    snapshots.delete(jobId);
    if (isTerminal(snapshot.state.status)) return;
    snapshots.set(jobId, snapshot);
    if (snapshots.size > CACHE_SIZE) snapshots.delete(snapshots.keys().next().value!);
  };

  function commandFor(report: AttemptReport): JobCommand {
    switch (report.type) {
      case 'StartAttempt':
      case 'SyncOutputs':
        return report;
      case 'FinishAttempt':
      case 'FinishProbe':
      case 'FailAttempt':
        return { ...report, now: new Date(), jitter: Math.random() };
    }
  }

  async function decide(
    workerId: string,
    jobId: string,
    report: AttemptReport,
    snapshot: JobSnapshot | undefined,
  ) {
    return runJobCommand(
      ctx.bus.store,
      jobId,
      (state) => {
        const holder = memberOf(state, report.attemptId)?.member.workerId;
        if (holder !== workerId) {
          throw new Refused(
            'NOT_YOUR_ATTEMPT',
            `attempt ${report.attemptId} of job ${jobId} is not held by worker ${workerId}`,
          );
        }
        return commandFor(report);
      },
      {
        actor: { kind: 'service', id: `worker:${workerId}` },
        now: new Date(),
        causationId: report.attemptId,
      },
      snapshot ? { snapshot } : {},
    );
  }

  async function onAttempt(
    workerId: string,
    jobId: string,
    report: AttemptReport,
  ): Promise<ReportReply> {
    const cached = snapshots.get(jobId);
    let result;
    try {
      result = await decide(workerId, jobId, report, cached);
    } catch (err) {
      if (!cached || !(err instanceof Refused || err instanceof DomainError)) throw err;
      result = await decide(workerId, jobId, report, undefined);
    }
    remember(jobId, result);
    return {
      ok: true,
      seq: result.head.seq,
      applied: result.events.length > 0,
      job: reportedJob(result.state, workerId),
    };
  }

  /**
   * A revoked worker is heard no more: its connection may outlive the revocation by a moment
   * (or for as long as a nats-server reload fails), and must not bring it back. Registrations
   * read the record itself; other reports rely on the watched set.
   */
  async function refuseIfRevoked(workerId: string, fresh: boolean): Promise<void> {
    const gone = fresh
      ? (await (await keysReady).record(workerId))?.status === 'revoked'
      : revoked.has(workerId);
    if (gone) throw new Refused('REVOKED', `worker ${workerId} was revoked: it must enrol again`);
  }

  /** Makes the dispatch consumers of a registering worker's slots: it may only read them. */
  async function openSlots(workerId: string, gpus: number[], cpuSlots: number): Promise<void> {
    for (const slot of dispatchSlots(workerId, gpus, cpuSlots)) {
      await retryTransient(`open the dispatch consumer ${slot.durable}`, () =>
        ctx.bus.jsm.consumers.add(Streams.dispatch, {
          durable_name: slot.durable,
          filter_subject: slot.subject,
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.All,
          ack_wait: DISPATCH_ACK_WAIT_NS,
          max_deliver: 20,
        }),
      );
    }
  }

  /** Where a job stands, as far as this worker may know. */
  async function onQuestion(workerId: string, jobId: string): Promise<ReportReply> {
    const { state, head } = await loadJob(ctx.bus.store, jobId);
    return { ok: true, seq: head.seq, applied: false, job: reportedJob(state, workerId) };
  }

  async function onWorker(
    workerId: string,
    event: Extract<Report, { kind: 'worker' }>['event'],
  ): Promise<ReportReply> {
    if (event.type === 'WorkerRegistered') {
      if (event.data.name !== workerId) {
        throw new Refused('NOT_YOURS', `worker ${workerId} may not register as ${event.data.name}`);
      }
      const indexes = event.data.gpus.map((g) => g.index);
      if (indexes.some((i) => i >= MAX_GPUS_PER_WORKER) || new Set(indexes).size < indexes.length) {
        throw new Refused(
          'BAD_REPORT',
          `a worker offers distinct GPUs numbered 0 to ${MAX_GPUS_PER_WORKER - 1}`,
        );
      }
      const last = registeredAt.get(workerId) ?? 0;
      if (Date.now() - last < REGISTER_EVERY_MS) {
        throw new Busy(`worker ${workerId} registers too often`);
      }
      registeredAt.set(workerId, Date.now());
      await refuseIfRevoked(workerId, true);
      await openSlots(workerId, indexes, event.data.cpuSlots);
    }
    const command: WorkerCommand =
      event.type === 'WorkerRegistered'
        ? { type: 'RegisterWorker', registration: event.data }
        : { type: 'LeaveCluster', reason: event.data.reason };
    const meta = () => ({
      actor: { kind: 'service' as const, id: `worker:${workerId}` },
      now: new Date(),
    });
    const { snapshot, events } = await runWorkerCommand(ctx.bus.store, workerId, command, meta());
    if (command.type === 'RegisterWorker') {
      // A revocation is written to the keys before it is recorded in the log: one that came
      // while this registration was on its way is seen now, and recorded after it.
      try {
        await refuseIfRevoked(workerId, true);
      } catch (err) {
        await runWorkerCommand(
          ctx.bus.store,
          workerId,
          { type: 'RevokeWorker' },
          { actor: { kind: 'service', id: ctx.instanceId }, now: new Date() },
        );
        throw err;
      }
    }
    return { ok: true, seq: snapshot.head.seq, applied: events.length > 0 };
  }

  async function answer(workerId: string, body: unknown): Promise<ReportReply> {
    const parsed = ReportSchema.safeParse(body);
    if (!parsed.success) {
      throw new Refused('BAD_REPORT', parsed.error.issues[0]?.message ?? 'malformed report');
    }
    const report = parsed.data;
    await refuseIfRevoked(workerId, false);
    if (report.kind === 'worker') {
      if (JSON.stringify(report.event).length > MAX_WORKER_EVENT_BYTES) {
        throw new Refused(
          'BAD_REPORT',
          `a worker event is at most ${MAX_WORKER_EVENT_BYTES} bytes`,
        );
      }
      return onWorker(workerId, report.event);
    }
    if (report.kind === 'self') {
      const latest = await ctx.bus.store.last('worker', workerId);
      return {
        ok: true,
        seq: latest?.seq ?? 0,
        applied: false,
        latest: latest && { seq: latest.seq, type: latest.type },
      };
    }
    if (report.kind === 'job') return onQuestion(workerId, report.jobId);
    if (report.kind === 'session') {
      return inTurn(`session:${report.sessionId}`, () =>
        onSessionReport(ctx, workerId, report.sessionId, report.report),
      );
    }
    return inTurn(report.jobId, () => onAttempt(workerId, report.jobId, report.report));
  }

  /** Reports of one job (or session) are decided one at a time, in the order they came. */
  function inTurn(key: string, decide: () => Promise<ReportReply>): Promise<ReportReply> {
    const before = perJob.get(key) ?? Promise.resolve();
    const reply = before.then(decide);
    const settled = reply.catch(() => undefined);
    perJob.set(key, settled);
    void settled.then(() => perJob.get(key) === settled && perJob.delete(key));
    return reply;
  }

  async function handle(msg: Msg, workerId: string): Promise<void> {
    let body: unknown;
    let reply: ReportReply;
    try {
      body = msg.json();
      reply = await answer(workerId, body);
    } catch (err) {
      if (err instanceof Refused || err instanceof DomainError) {
        const level = err instanceof Refused ? 'warn' : 'info';
        log[level]({ workerId, code: err.code, report: describe(body) }, err.message);
        const jobId = (body as { jobId?: unknown } | undefined)?.jobId;
        const snapshot = typeof jobId === 'string' ? snapshots.get(jobId) : undefined;
        reply = {
          ok: false,
          code: err.code,
          message: err.message,
          ...(snapshot && { job: reportedJob(snapshot.state, workerId) }),
        };
      } else if (err instanceof Busy) {
        reply = { ok: false, code: 'UNAVAILABLE', message: err.message };
      } else if (err instanceof SyntaxError) {
        reply = { ok: false, code: 'BAD_REPORT', message: 'a report is JSON' };
      } else {
        const unavailable = isTransient(err) || err instanceof EventStoreError;
        log.error({ err, workerId }, 'could not handle a report');
        reply = {
          ok: false,
          code: unavailable ? 'UNAVAILABLE' : 'REPORT_FAILED',
          message: (err as Error).message,
        };
      }
    }
    msg.respond(JSON.stringify(reply));
  }

  const served = serveWorkerRequests(ctx, {
    subject: Subjects.allReports,
    queue: 'reports',
    limits: LIMITS,
    log,
    handle,
    busy: (msg, workerId) => {
      const reply: ReportReply = {
        ok: false,
        code: 'UNAVAILABLE',
        message: `worker ${workerId} has ${LIMITS.waiting} reports waiting; send again later`,
      };
      msg.respond(JSON.stringify(reply));
    },
  });

  return {
    stop: async () => {
      await served.stop();
      stopping.abort();
      await watching;
    },
  };
}

/** What a refused report was about, for the log: never its whole body. */
function describe(body: unknown): Record<string, unknown> | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as {
    kind?: unknown;
    jobId?: unknown;
    report?: { type?: unknown; attemptId?: unknown };
    event?: { type?: unknown };
  };
  return {
    kind: b.kind,
    jobId: b.jobId,
    type: b.report?.type ?? b.event?.type,
    attemptId: b.report?.attemptId,
  };
}
