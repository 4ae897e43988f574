import { afterEach, describe, expect, it } from 'vitest';
import { decideJob, evolveJob, initialJobState } from '@trainyard/domain';
import type { DomainEvent, JobEvent, JobStatus } from '@trainyard/events';
import { Dependencies } from '../src/dependencies.ts';
import { FakeClock, FakeLog } from './fakes.ts';

const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((stop) => stop()));

const submitted = (dependsOn?: string[]): DomainEvent => ({
  type: 'JobSubmitted',
  data: {
    owner: 'alice',
    spec: {
      name: 'step',
      command: 'true',
      resources: { gpus: 0 },
      priority: 0,
      maxRetries: 3,
      env: {},
      ...(dependsOn && { dependsOn }),
    },
  },
});

function harness(opts: { failReads?: number } = {}) {
  const log = new FakeLog();
  const clock = new FakeClock();
  const stop = new AbortController();
  const warnings: string[] = [];
  let failReads = opts.failReads ?? 0;
  let reads = 0;
  /** How a job stands in the log, folded from its events as a store read would. */
  const statusOf = (id: string): JobStatus | 'none' =>
    log.events
      .filter((e) => e.aggregateId === id)
      .reduce((s, e) => evolveJob(s, e as unknown as JobEvent, e.occurredAt), initialJobState(id))
      .status;
  const dependencies: Dependencies = new Dependencies({
    state: () => log.state,
    statusOf: (id) => {
      reads++;
      if (failReads-- > 0) return Promise.reject(new Error('the log is away'));
      return Promise.resolve(statusOf(id));
    },
    resolve: (id, outcomes) => {
      const job = log.state.jobs.get(id)!;
      for (const e of decideJob({ type: 'ResolveDependencies', outcomes }, job.state))
        append(id, e);
      return Promise.resolve();
    },
    log: { warn: (_obj: unknown, msg?: string) => void warnings.push(msg ?? '') },
    signal: stop.signal,
    clock,
  });
  /** Appends and folds an event, and hands it to the dependencies as the live reader would. */
  function append(id: string, event: DomainEvent): void {
    log.append('job', id, event);
    log.deliver();
    dependencies.live(log.events.at(-1)!);
  }
  const succeed = (id: string) => {
    append(id, {
      type: 'JobAssigned',
      data: { attemptId: `a-${id}`, attempt: 1, workerId: 'w1', gpus: [], vramBytes: 0, cpus: 1 },
    });
    append(id, { type: 'JobStarted', data: { attemptId: `a-${id}` } });
    append(id, { type: 'JobSucceeded', data: { attemptId: `a-${id}`, durationMs: 1 } });
  };
  stops.push(() => stop.abort());
  return { log, clock, dependencies, append, succeed, statusOf, warnings, reads: () => reads };
}

const drain = async () => {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
};

describe('dependencies in the scheduler', () => {
  it('frees a job once every job it depends on succeeded, whether the term caught up before or after', async () => {
    const { log, dependencies, append, succeed, statusOf } = harness();
    log.append('job', 'job_a', submitted());
    log.append('job', 'job_b', submitted());
    log.append('job', 'job_c', submitted(['job_a', 'job_b']));
    log.deliver();
    dependencies.caughtUp();
    await drain();
    expect(dependencies.waiting).toBe(1);
    succeed('job_a');
    await drain();
    expect(log.state.jobs.get('job_c')!.state.dependenciesMet).toBe(false);
    append('job_d', submitted(['job_a']));
    await drain();
    expect(statusOf('job_d')).toBe('queued');
    expect(log.state.jobs.get('job_d')!.state.dependenciesMet).toBe(true);
    succeed('job_b');
    await drain();
    expect(
      log.events.filter((e) => e.type === 'JobDependenciesMet').map((e) => e.aggregateId),
    ).toEqual(['job_d', 'job_c']);
    expect(dependencies.waiting).toBe(0);
  });

  it('fails the jobs waiting on one that was cancelled, and only those', async () => {
    const { log, dependencies, append, reads } = harness();
    log.append('job', 'job_a', submitted());
    log.append('job', 'job_b', submitted());
    log.deliver();
    dependencies.caughtUp();
    append('job_c', submitted(['job_a']));
    append('job_d', submitted(['job_a', 'job_b']));
    append('job_e', submitted(['job_b']));
    append('job_a', { type: 'JobCancelled', data: {} });
    await drain();
    const failed = log.events.filter((e) => e.type === 'JobDependencyFailed');
    expect(failed.map((e) => e.aggregateId).sort()).toEqual(['job_c', 'job_d']);
    expect(failed[0]).toMatchObject({ data: { dependency: 'job_a', status: 'cancelled' } });
    expect(log.state.jobs.has('job_c')).toBe(false);
    expect(log.state.jobs.get('job_e')!.state.dependenciesMet).toBe(false);
    expect(dependencies.waiting).toBe(1);
    // The end seen live serves every job waiting on it: none reads the log for it.
    expect(reads()).toBe(0);
  });

  it('looks again, later, when the log cannot be read, and says so', async () => {
    const { log, clock, dependencies, append, warnings } = harness({ failReads: 2 });
    log.append('job', 'job_a', submitted());
    log.deliver();
    dependencies.caughtUp();
    append('job_a', { type: 'JobCancelled', data: {} });
    // Submitted after its dependency ended: how it ended is read from the log.
    append('job_b', submitted(['job_a']));
    await drain();
    expect(warnings).toEqual(['could not look at a job’s dependencies']);
    clock.advance(1_000);
    await drain();
    expect(warnings).toHaveLength(2);
    expect(log.events.some((e) => e.type === 'JobDependencyFailed')).toBe(false);
    clock.advance(2_000);
    await drain();
    expect(log.events.filter((e) => e.type === 'JobDependencyFailed')).toHaveLength(1);
  });
});
