import { chmod, mkdir, rmdir } from 'node:fs/promises';
import { hostname, totalmem } from 'node:os';
import type { JsMsg } from '@nats-io/jetstream';
import { failure } from '@trainyard/domain';
import {
  DISPATCH_VERSION,
  retryTransient,
  Streams,
  Subjects,
  type Gpu,
  type Heartbeat,
  type WorkerEvent,
  DispatchMessageSchema,
  type RunAttempt,
} from '@trainyard/events';
import { dispatchSlots, sendReport, type Report } from '@trainyard/application';
import { fetchedBlobs } from '@trainyard/blobs';
import { supervise, takeFromDurable, type ServiceContext } from '@trainyard/service-kit';
import { AttemptRun } from './attempt.ts';
import { killGroup, leftSandboxes, removeSandbox } from './sandbox.ts';
import { SessionRuns } from './sessions.ts';
import { releaseUser } from './users.ts';
import type { WorkerContext, WorkerOptions } from './options.ts';

export interface RunningWorker {
  readonly id: string;
  readonly gpus: Gpu[];
  running(): string[];
  stop(): Promise<void>;
}

/** Reports an event of this worker's own; the control plane appends it. Its sequence. */
async function reportWorkerEvent(
  ctx: ServiceContext,
  id: string,
  event: Extract<WorkerEvent, { type: 'WorkerRegistered' | 'WorkerLeft' }>,
): Promise<number> {
  const reply = await sendReport(ctx.bus.nc, id, { kind: 'worker', event });
  if (!reply.ok) throw new Error(`${event.type} refused: ${reply.message} (${reply.code})`);
  return reply.seq;
}

/** How often a worker asks the control plane whether it was declared lost. */
const LOST_CHECK_MS = 1_000;

/** Asks the control plane a question about this worker or its jobs; its answer. */
async function ask(ctx: ServiceContext, id: string, question: Report) {
  const reply = await sendReport(ctx.bus.nc, id, question);
  if (!reply.ok) throw new Error(`${reply.message} (${reply.code})`);
  return reply;
}

/**
 * Starts a worker daemon: registers its inventory, heartbeats, and runs what is dispatched to
 * its slots. Each slot has a durable consumer of its own on the dispatch stream.
 */
export async function startWorker(
  service: ServiceContext,
  opts: WorkerOptions,
): Promise<RunningWorker> {
  const id = opts.name;
  const gpus = await opts.inventory.list();
  const ctx: WorkerContext = {
    ...service,
    reads: (jobId) => fetchedBlobs(service.bus.nc, id, jobId),
    written: opts.ownBucket ? await service.blobs.ofWorker(id) : service.blobs,
    gpus,
  };
  const log = ctx.log.child({ component: 'worker', workerId: id });
  await mkdir(opts.sandboxRoot, { recursive: true });
  await chmod(opts.sandboxRoot, 0o711);
  if (!opts.users && opts.runtime.kind === 'process') {
    log.warn(
      'jobs and sessions run as this worker’s own user and can reach what it can: run the worker as root to give each a user of its own',
    );
  }
  if (opts.runtime.kind === 'process' && !opts.runtime.limitsMemory) {
    log.warn(
      'this worker cannot hold memory limits (it makes no memory cgroups: run it as root on a host with a memory controller): jobs with memoryGb are placed elsewhere',
    );
  }
  const attempts = new Map<string, AttemptRun>();
  const sessions = new SessionRuns(ctx, opts, id, (attemptId) => attempts.get(attemptId));
  const loops: Promise<void>[] = [];
  const stopped = new AbortController();

  /**
   * Takes over what an earlier run of this worker left: an attempt the log still has running
   * here is re-attached (or reported gone); any other left process group is killed, as the log
   * has fenced it (the worker was lost, or the job moved on).
   */
  async function recover(): Promise<string[]> {
    await sessions.sweep();
    const resumed: string[] = [];
    for (const { box, marker } of await leftSandboxes(opts.sandboxRoot)) {
      const { job } = await ask(ctx, id, { kind: 'job', jobId: marker.msg.jobId });
      const ours = job?.attemptId === marker.msg.attemptId && job.attemptStatus === 'running';
      if (!ours || !marker.pid) {
        killGroup(marker.pid);
        const failed = (err: unknown) =>
          log.error({ err, jobId: marker.msg.jobId }, 'could not end a left attempt’s uid');
        if (await releaseUser(opts.users, marker.user, failed)) await removeSandbox(box);
        log.warn(
          { jobId: marker.msg.jobId },
          'killed an attempt the log no longer gives this worker',
        );
        continue;
      }
      const run = new AttemptRun(ctx, opts, marker.msg, stopped.signal);
      attempts.set(run.attemptId, run);
      void run.done.then(() => attempts.delete(run.attemptId));
      if (await run.resume(box, marker.pid, marker.startedAt, marker.user)) {
        resumed.push(run.attemptId);
        log.info({ jobId: marker.msg.jobId, pid: marker.pid }, 're-attached to a running attempt');
      }
    }
    const swept = await opts.runtime.sweep?.(new Set(resumed));
    if (swept?.length) log.warn({ attempts: swept }, 'removed containers no attempt owns any more');
    return resumed;
  }
  const register = (runningAttempts: string[]) =>
    reportWorkerEvent(ctx, id, {
      type: 'WorkerRegistered',
      data: {
        name: id,
        hostname: hostname(),
        ...(opts.address && { address: opts.address }),
        gpus,
        cpuSlots: opts.cpuSlots,
        memoryBytes: opts.memoryBytes ?? totalmem(),
        limitsMemory: opts.runtime.limitsMemory ?? false,
        runtime: opts.runtime.kind,
        version: opts.version,
        dispatchVersion: DISPATCH_VERSION,
        runningAttempts,
      },
    });
  let registeredSeq = await register(await recover());

  /**
   * A worker declared lost while it ran on (frozen, or cut off from NATS past the timeout) has
   * had its attempts failed and given to others: it stops them, then registers again.
   */
  async function comeBackIfLost(): Promise<void> {
    const { latest } = await ask(ctx, id, { kind: 'self' });
    if (!latest || latest.seq <= registeredSeq || latest.type !== 'WorkerLost') return;
    log.warn(
      { attempts: attempts.size },
      'this worker was declared lost; stopping its attempts and registering again',
    );
    await Promise.all([...[...attempts.values()].map((a) => a.abandon()), sessions.abandon()]);
    if (!stopped.signal.aborted) registeredSeq = await register([]);
  }
  let checking: Promise<void> | null = null;
  const lostCheck = setInterval(
    () => {
      checking ??= comeBackIfLost()
        .catch((err: unknown) => log.warn({ err }, 'could not check whether this worker was lost'))
        .finally(() => (checking = null));
    },
    Math.max(opts.heartbeatMs, LOST_CHECK_MS),
  );

  const beat = async () => {
    const readings = await opts.inventory.read().catch(() => []);
    const hb: Heartbeat = {
      workerId: id,
      at: new Date().toISOString(),
      gpus: readings,
      runningAttempts: [...attempts.keys()],
    };
    ctx.bus.nc.publish(Subjects.heartbeat(id), JSON.stringify(hb));
  };
  await beat();
  const heartbeat = setInterval(() => void beat().catch(() => undefined), opts.heartbeatMs);

  async function onRun(msg: JsMsg, run: RunAttempt): Promise<void> {
    if (attempts.has(run.attemptId) || stopped.signal.aborted) {
      if (stopped.signal.aborted) msg.nak(5_000);
      else msg.ack();
      return;
    }
    const attempt = new AttemptRun(ctx, opts, run, stopped.signal);
    attempts.set(run.attemptId, attempt);
    void attempt.done.then(() => attempts.delete(run.attemptId));
    const working = setInterval(() => msg.working(), 10_000);
    try {
      await attempt.start();
      msg.ack();
    } catch (err) {
      attempts.delete(run.attemptId);
      log.error({ err, jobId: run.jobId }, 'could not start the attempt; will be redelivered');
      msg.nak(2_000);
    } finally {
      clearInterval(working);
    }
  }

  /**
   * A dispatch of a version this worker cannot read: its attempt fails as a platform failure
   * that says to upgrade the worker (and runs elsewhere), rather than holding its slot.
   */
  async function onNewer(msg: JsMsg, body: Record<string, unknown>, v: number): Promise<void> {
    const { kind, jobId, attemptId } = body;
    const message = `worker ${id} reads dispatch messages up to version ${DISPATCH_VERSION}, and was sent version ${v}: upgrade it`;
    log.error({ subject: msg.subject, version: v, jobId, attemptId }, message);
    if (kind !== 'run' || typeof jobId !== 'string' || typeof attemptId !== 'string') {
      msg.term();
      return;
    }
    try {
      await sendReport(ctx.bus.nc, id, {
        kind: 'attempt',
        jobId,
        report: { type: 'FailAttempt', attemptId, failure: failure('launchError', message) },
      });
      msg.ack();
    } catch (err) {
      log.error({ err, jobId, attemptId }, 'could not report an attempt it cannot read');
      msg.nak(2_000);
    }
  }

  async function onMessage(msg: JsMsg): Promise<void> {
    const body = msg.json<Record<string, unknown> | null>();
    const parsed = DispatchMessageSchema.safeParse(body);
    if (!parsed.success) {
      const v = body?.v;
      if (typeof v === 'number' && v > DISPATCH_VERSION) return onNewer(msg, body!, v);
      log.error({ subject: msg.subject }, 'malformed dispatch message dropped');
      msg.term();
      return;
    }
    const m = parsed.data;
    switch (m.kind) {
      case 'run':
        return onRun(msg, m);
      case 'session': {
        // Its code may take a while to fetch and unpack: the message is not sent again meanwhile.
        const working = setInterval(() => msg.working(), 10_000);
        try {
          await sessions.start(m);
        } finally {
          clearInterval(working);
        }
        break;
      }
      case 'sessionStop':
        await sessions.stop(m);
        break;
      case 'stop':
        await attempts.get(m.attemptId)?.cancel();
        break;
    }
    msg.ack();
  }

  const slots = dispatchSlots(
    id,
    gpus.map((g) => g.index),
    opts.cpuSlots,
  );
  for (const { durable } of slots) {
    const consumer = await retryTransient(`open the dispatch consumer ${durable}`, () =>
      ctx.bus.js.consumers.get(Streams.dispatch, durable),
    );
    loops.push(
      supervise(
        durable,
        () =>
          takeFromDurable(
            consumer,
            (msg) =>
              void onMessage(msg).catch((err: unknown) =>
                log.error({ err }, 'dispatch handling failed'),
              ),
            stopped.signal,
          ),
        stopped.signal,
        log,
      ),
    );
  }
  sessions.serve();
  log.info(
    { gpus: gpus.length, cpuSlots: opts.cpuSlots, simulated: gpus.some((g) => g.simulated) },
    'worker ready',
  );

  return {
    id,
    gpus,
    running: () => [...attempts.keys()],
    stop: async () => {
      stopped.abort();
      clearInterval(lostCheck);
      await checking;
      await Promise.all(loops);
      clearInterval(heartbeat);
      await Promise.all([...[...attempts.values()].map((a) => a.abandon()), sessions.close()]);
      opts.runtime.close?.();
      // Its sandboxes are gone with its attempts; an empty root goes too (one left is kept).
      await rmdir(opts.sandboxRoot).catch(() => undefined);
      await reportWorkerEvent(ctx, id, { type: 'WorkerLeft', data: { reason: 'stopped' } }).catch(
        (err: unknown) => log.warn({ err }, 'could not record leaving'),
      );
    },
  };
}
