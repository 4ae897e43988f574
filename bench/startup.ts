import { randomUUID } from 'node:crypto';
import type { JobEvent } from '@trainyard/events';
import { EMPTY_HEAD } from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';
import { DEFAULT_SCHEDULER_OPTIONS, startScheduler } from '@trainyard/scheduler';
import { startTestNats, testContext } from '@trainyard/testkit';

const spec = {
  name: 'history',
  command: 'true',
  resources: { gpus: 1, vramGb: 4 },
  priority: 0,
  maxRetries: 0,
  env: {},
};

/** Appends a finished job's history (submitted, then cancelled): two events per job. */
async function appendHistory(ctx: ServiceContext, jobs: number, inFlight = 256): Promise<void> {
  let next = 0;
  const meta = { actor: { kind: 'service' as const, id: 'bench' }, now: new Date() };
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < jobs) {
        next++;
        const id = `hist_${randomUUID().replaceAll('-', '')}`;
        const events: JobEvent[] = [
          { type: 'JobSubmitted', data: { owner: 'bench', spec } },
          { type: 'JobCancelled', data: {} },
        ];
        await ctx.bus.store.append({
          aggregate: 'job',
          aggregateId: id,
          head: EMPTY_HEAD,
          events,
          meta,
        });
      }
    }),
  );
}

async function timeToReady(ctx: ServiceContext, snapshotEveryEvents: number) {
  const started = performance.now();
  const scheduler = await startScheduler(ctx, {
    ...DEFAULT_SCHEDULER_OPTIONS,
    leaseTtlMs: 1_000,
    snapshotEveryEvents,
  });
  await scheduler.ready();
  const ms = Math.round(performance.now() - started);
  const fromSeq = scheduler.termStartSeq();
  await scheduler.stop();
  return { ms, fromSeq };
}

/**
 * How long a scheduler takes from start to placing jobs with `jobs` jobs in the log: folding the
 * whole log, then (after the first one leaves its snapshot as it stops) starting from a snapshot.
 */
export async function schedulerStartup(ctx: ServiceContext, jobs: number) {
  await appendHistory(ctx, jobs);
  const events = await ctx.bus.store.lastSeq();
  const full = await timeToReady(ctx, Number.MAX_SAFE_INTEGER);
  const fromSnapshot = await timeToReady(ctx, Number.MAX_SAFE_INTEGER);
  return {
    jobs,
    events,
    fullReplayMs: full.ms,
    fromSnapshotMs: fromSnapshot.ms,
    snapshotAtSeq: fromSnapshot.fromSeq - 1,
  };
}

/** The start-up benchmark on a NATS server of its own (no other scheduler holds the lease). */
export async function startupBench(jobs: number) {
  const nats = await startTestNats();
  const ctx = await testContext(nats.url, 'startup-bench');
  try {
    return await schedulerStartup(ctx, jobs);
  } finally {
    await ctx.bus.close();
    await nats.stop();
  }
}
