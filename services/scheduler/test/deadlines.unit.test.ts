import { afterEach, describe, expect, it } from 'vitest';
import { decideJob, timeLimitDeadline, type TrackedJob } from '@trainyard/domain';
import type { DomainEvent } from '@trainyard/events';
import { Deadlines } from '../src/deadlines.ts';
import { FakeClock, FakeLog, T0 } from './fakes.ts';

const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((stop) => stop()));

/** A job that runs since T0 (the fake log's time), with a time limit of `timeLimit` seconds. */
function running(log: FakeLog, id: string, timeLimit?: number): void {
  const events: DomainEvent[] = [
    {
      type: 'JobSubmitted',
      data: {
        owner: 'alice',
        spec: {
          name: id,
          command: 'sleep 600',
          resources: { gpus: 0 },
          priority: 0,
          maxRetries: 3,
          env: {},
          ...(timeLimit !== undefined && { timeLimit }),
        },
      },
    },
    {
      type: 'JobAssigned',
      data: { attemptId: `att-${id}`, attempt: 1, workerId: 'w1', gpus: [], vramBytes: 0, cpus: 1 },
    },
    { type: 'JobStarted', data: { attemptId: `att-${id}` } },
  ];
  for (const e of events) log.append('job', id, e);
}

function harness(fail: (id: string) => boolean = () => false) {
  const log = new FakeLog();
  const clock = new FakeClock();
  const enforced: { id: string; atS: number }[] = [];
  const warnings: string[] = [];
  const stop = new AbortController();
  const limits = new Deadlines({
    jobs: () => log.state.jobs.values(),
    deadline: (job) => timeLimitDeadline(job.state),
    what: 'stop a job at its time limit',
    enforce: (job: TrackedJob, now: Date) => {
      enforced.push({ id: job.state.id, atS: (now.getTime() - T0.getTime()) / 1000 });
      if (fail(job.state.id)) return Promise.reject(new Error('the log is away'));
      for (const e of decideJob({ type: 'EnforceTimeLimit', now }, job.state))
        log.append('job', job.state.id, e);
      log.deliver();
      return Promise.resolve();
    },
    log: { warn: (_obj: unknown, msg?: string) => void warnings.push(msg ?? '') },
    signal: stop.signal,
    clock,
  });
  stops.push(() => {
    stop.abort();
    limits.stop();
  });
  return { log, clock, limits, enforced, warnings, stop };
}

const drain = () => new Promise((resolve) => setImmediate(resolve));

describe('time limits in the scheduler', () => {
  it('stops each running job at its own limit, and nothing without one', async () => {
    const { log, clock, limits, enforced } = harness();
    running(log, 'job_a', 60);
    running(log, 'job_b', 120);
    running(log, 'job_free');
    log.deliver();
    limits.check();
    clock.advance(59_999);
    await drain();
    expect(enforced).toEqual([]);
    clock.advance(1);
    await drain();
    expect(enforced).toEqual([{ id: 'job_a', atS: 60 }]);
    expect(log.events.at(-1)).toMatchObject({ type: 'JobTimeLimitReached', aggregateId: 'job_a' });
    clock.advance(3_600_000);
    await drain();
    expect(enforced).toEqual([
      { id: 'job_a', atS: 60 },
      { id: 'job_b', atS: 120 },
    ]);
    expect(log.state.jobs.get('job_free')?.state.timeLimitReached).toBe(false);
  });

  it('brings the timer forward for a job that starts with a sooner deadline', async () => {
    const { log, clock, limits, enforced } = harness();
    running(log, 'job_long', 600);
    log.deliver();
    limits.check();
    running(log, 'job_short', 30);
    log.deliver();
    limits.watch(log.state.jobs.get('job_short')!);
    clock.advance(30_000);
    await drain();
    expect(enforced).toEqual([{ id: 'job_short', atS: 30 }]);
  });

  it('looks again a second later when a stop could not be recorded, and says so', async () => {
    let failures = 1;
    const { log, clock, limits, enforced, warnings } = harness(() => failures-- > 0);
    running(log, 'job_a', 10);
    log.deliver();
    limits.check();
    clock.advance(10_000);
    await drain();
    expect(warnings).toEqual(['could not stop a job at its time limit']);
    clock.advance(1_000);
    await drain();
    expect(enforced.map((e) => e.atS)).toEqual([10, 11]);
    expect(log.state.jobs.get('job_a')?.state.timeLimitReached).toBe(true);
    clock.advance(60_000);
    await drain();
    expect(enforced).toHaveLength(2);
  });

  it('sets no timer once its term has ended', async () => {
    const { log, clock, limits, enforced, stop } = harness();
    running(log, 'job_a', 10);
    log.deliver();
    stop.abort();
    limits.check();
    clock.advance(60_000);
    await drain();
    expect(enforced).toEqual([]);
  });
});
