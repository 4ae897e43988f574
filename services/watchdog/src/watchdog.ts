import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { evolveWorker, initialWorker } from '@trainyard/domain';
import {
  ConcurrencyError,
  EMPTY_HEAD,
  HeartbeatSchema,
  retryTransient,
  Streams,
  Subjects,
  type WorkerEvent,
} from '@trainyard/events';
import { runWorkerCommand, type WorkerSnapshot } from '@trainyard/application';
import { supervise, takeFromDurable, type ServiceContext } from '@trainyard/service-kit';
import { startFetches } from './fetches.ts';
import { startReports } from './reports.ts';
import { startSessionTimers } from './session-timers.ts';

export interface WatchdogOptions {
  heartbeatTimeoutMs: number;
  checkEveryMs: number;
}

export const DEFAULT_WATCHDOG_OPTIONS: WatchdogOptions = {
  heartbeatTimeoutMs: 30_000,
  checkEveryMs: 2_000,
};

export interface RunningWatchdog {
  stop(): Promise<void>;
}

interface Watched {
  /** The worker as the log has it; a worker seen only by its heartbeats has no event yet. */
  worker: WorkerSnapshot;
  lastSeenMs: number;
}

/**
 * Watches the workers. It follows worker events to know who should be alive, and is a durable
 * consumer of the heartbeat subjects to know who is; silence past the timeout becomes
 * `WorkerLost`, appended at the worker's head so that a worker that just re-registered wins.
 * It also answers the workers' reports (`startReports`): workers append nothing themselves; and
 * gives them the code and artifacts of the attempts they hold (`startFetches`); and stops
 * sessions whose timers run out (`startSessionTimers`).
 */
export async function startWatchdog(
  ctx: ServiceContext,
  opts: WatchdogOptions = DEFAULT_WATCHDOG_OPTIONS,
): Promise<RunningWatchdog> {
  const log = ctx.log.child({ component: 'watchdog' });
  const workers = new Map<string, Watched>();
  const startedMs = Date.now();

  const stopping = new AbortController();
  let eventsRead = 0;
  const followEvents = supervise(
    'watchdog-events',
    () =>
      ctx.events.follow(
        {
          fromSeq: eventsRead + 1,
          filter: Subjects.aggregateEvents('worker'),
          signal: stopping.signal,
          onStall: (read) => log.warn({ read }, 'watchdog reader stalled; starting it again'),
        },
        (e) => {
          eventsRead = e.seq;
          const known = workers.get(e.aggregateId);
          workers.set(e.aggregateId, {
            worker: {
              state: evolveWorker(
                known?.worker.state ?? initialWorker,
                e as typeof e & WorkerEvent,
              ),
              head: { seq: e.seq, hash: e.hash },
            },
            lastSeenMs: Math.max(
              known?.lastSeenMs ?? startedMs,
              e.type === 'WorkerRegistered' ? Date.parse(e.occurredAt) : 0,
            ),
          });
        },
      ),
    stopping.signal,
    log,
  );

  const beats = await retryTransient('open the heartbeat consumer', async () => {
    await ctx.bus.jsm.consumers.add(Streams.heartbeats, {
      durable_name: 'watchdog',
      filter_subject: Subjects.allHeartbeats,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.LastPerSubject,
    });
    return ctx.bus.js.consumers.get(Streams.heartbeats, 'watchdog');
  });
  const followBeats = supervise(
    'watchdog-heartbeats',
    () =>
      takeFromDurable(
        beats,
        (msg) => {
          const hb = HeartbeatSchema.safeParse(msg.json());
          // A worker may publish only on its own subject: a beat that names another is not one.
          if (hb.success && msg.subject === `ty.hb.${hb.data.workerId}`) {
            const w = workers.get(hb.data.workerId);
            const seenMs = Math.min(Date.now(), msg.info.timestampNanos / 1e6);
            if (w) w.lastSeenMs = Math.max(w.lastSeenMs, seenMs);
            else
              workers.set(hb.data.workerId, {
                worker: { state: initialWorker, head: EMPTY_HEAD },
                lastSeenMs: seenMs,
              });
          }
          msg.ack();
        },
        stopping.signal,
        { maxMessages: 256 },
      ),
    stopping.signal,
    log,
  );

  async function check(): Promise<void> {
    const now = Date.now();
    for (const [id, w] of workers) {
      if (w.worker.state.status !== 'online' || now - w.lastSeenMs < opts.heartbeatTimeoutMs) {
        continue;
      }
      try {
        const lost = await runWorkerCommand(
          ctx.bus.store,
          id,
          {
            type: 'MarkWorkerLost',
            lastSeenAt: new Date(w.lastSeenMs).toISOString(),
            timeoutMs: opts.heartbeatTimeoutMs,
          },
          { actor: { kind: 'service', id: ctx.instanceId }, now: new Date() },
          { snapshot: w.worker, decideAgain: false },
        );
        w.worker = lost.snapshot;
        log.warn({ workerId: id, silentMs: now - w.lastSeenMs }, 'worker lost');
      } catch (err) {
        if (!(err instanceof ConcurrencyError))
          log.error({ err, workerId: id }, 'could not mark worker lost');
      }
    }
  }

  let checking = Promise.resolve();
  const timer = setInterval(() => {
    checking = checking.then(check);
  }, opts.checkEveryMs);
  const reports = startReports(ctx);
  const fetches = startFetches(ctx);
  const timers = startSessionTimers(ctx, opts.checkEveryMs);
  log.info({ timeoutMs: opts.heartbeatTimeoutMs }, 'watchdog started');
  return {
    stop: async () => {
      clearInterval(timer);
      stopping.abort();
      await Promise.all([followEvents, followBeats, checking]);
      await Promise.all([reports.stop(), fetches.stop(), timers.stop()]);
    },
  };
}
