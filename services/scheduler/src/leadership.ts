import { KvLease, onAbort, sleep, type ServiceContext } from '@trainyard/service-kit';
import { DEFAULT_SCHEDULER_OPTIONS, type SchedulerOptions } from './options.ts';
import { Term } from './term.ts';

export interface RunningScheduler {
  isLeader(): boolean;
  /** The sequence the current (or last) term started folding from: 1 without a snapshot. */
  termStartSeq(): number;
  /** Resolves once this scheduler leads and has caught up with the log. */
  ready(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The options, with the aging rate the operator set (`TRAINYARD_PRIORITY_AGING_PER_HOUR`) and
 * the probes' timeout (`TRAINYARD_PROBE_TIMEOUT_MIN`), which reservations expect a probe to run.
 */
function withConfiguredPolicy(ctx: ServiceContext, opts: SchedulerOptions): SchedulerOptions {
  const agingPerHour = ctx.config.TRAINYARD_PRIORITY_AGING_PER_HOUR ?? opts.policy.agingPerHour;
  const probeMs = Math.round(ctx.config.TRAINYARD_PROBE_TIMEOUT_MIN * 60_000);
  return { ...opts, policy: { ...opts.policy, agingPerHour, probeMs } };
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

  /**
   * One term: renews the lease while it runs, and ends it when the lease is lost. A term that
   * ended with an error is aborted too, so that no round of it plans on after it.
   */
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
      current = new Term(ctx, withConfiguredPolicy(ctx, opts), term.signal);
      await current.run();
    } finally {
      term.abort();
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
