import { afterEach, describe, expect, it } from 'vitest';
import {
  decideJob,
  DomainError,
  evolveJob,
  initialJobState,
  type JobState,
} from '@trainyard/domain';
import type { DomainEvent, JobEvent, JobSpec, StoredEvent } from '@trainyard/events';
import { Shards } from '../src/shards.ts';
import { FakeClock, FakeLog } from './fakes.ts';

const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((stop) => stop()));

const spec = (over: Partial<JobSpec> = {}): JobSpec => ({
  name: 'sweep',
  command: 'python shard.py',
  resources: { gpus: 1, vramGb: 4 },
  priority: 0,
  maxRetries: 3,
  env: { SEED: '7' },
  ...over,
});

const submitted = (over: Partial<JobSpec> = {}): DomainEvent => ({
  type: 'JobSubmitted',
  data: { owner: 'alice', team: 'vision', spec: spec({ shards: 3, ...over }) },
});

function harness(opts: { failCommands?: number } = {}) {
  const log = new FakeLog();
  const clock = new FakeClock();
  const stop = new AbortController();
  const warnings: string[] = [];
  let failCommands = opts.failCommands ?? 0;
  /** A job as the log has it, folded from its events as a store read would. */
  const job = (id: string): JobState =>
    log.events
      .filter((e) => e.aggregateId === id)
      .reduce((s, e) => evolveJob(s, e as unknown as JobEvent, e.occurredAt), initialJobState(id));
  const shards: Shards = new Shards({
    state: () => log.state,
    statusOf: (id) => Promise.resolve(job(id).status),
    command: (id, command) => {
      if (failCommands-- > 0) return Promise.reject(new Error('the log is away'));
      try {
        for (const e of decideJob(command, job(id))) append(id, e);
      } catch (err) {
        if (!(err instanceof DomainError)) throw err;
      }
      return Promise.resolve();
    },
    log: {
      info: () => undefined,
      warn: (_obj: unknown, msg?: string) => void warnings.push(msg ?? ''),
    },
    signal: stop.signal,
    clock,
  });
  /** Appends and folds an event, and hands it to the shards as the live reader would. */
  function append(id: string, event: DomainEvent): void {
    log.append('job', id, event);
    log.deliver();
    shards.live(log.events.at(-1)!);
  }
  const run = (id: string) => {
    const attemptId = `a-${id}`;
    append(id, {
      type: 'JobAssigned',
      data: { attemptId, attempt: 1, workerId: 'w1', gpus: [0], vramBytes: 4, cpus: 0 },
    });
    append(id, { type: 'JobStarted', data: { attemptId } });
  };
  const succeed = (id: string) => {
    run(id);
    append(id, { type: 'JobSucceeded', data: { attemptId: `a-${id}`, durationMs: 1 } });
  };
  const fail = (id: string) => {
    run(id);
    const failure = {
      kind: 'user' as const,
      retryable: false,
      reason: 'nonZeroExit',
      message: 'exit 1',
    };
    append(id, {
      type: 'JobAttemptFailed',
      data: { attemptId: `a-${id}`, exitCode: 1, failure, durationMs: 1, retry: null },
    });
  };
  const of = (type: string) => log.events.filter((e) => e.type === type);
  stops.push(() => stop.abort());
  return { log, clock, shards, append, succeed, fail, run, job, of, warnings };
}

const drain = async () => {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
};

describe('array jobs in the scheduler', () => {
  it('submits each shard with its index, and the array job succeeds once every shard has', async () => {
    const { log, shards, append, succeed, job, of } = harness();
    shards.caughtUp();
    append('job_x', submitted({ dependsOn: ['job_dep'] }));
    await drain();
    expect(of('JobSubmitted')).toHaveLength(1);
    append('job_x', { type: 'JobDependenciesMet', data: {} });
    await drain();
    const subs = of('JobSubmitted').slice(1) as StoredEvent<
      Extract<JobEvent, { type: 'JobSubmitted' }>
    >[];
    expect(subs.map((e) => e.aggregateId).sort()).toEqual(['job_x_0', 'job_x_1', 'job_x_2']);
    const first = subs.find((e) => e.aggregateId === 'job_x_1')!.data;
    expect(first).toMatchObject({
      owner: 'alice',
      team: 'vision',
      shardOf: { jobId: 'job_x', index: 1, count: 3 },
      build: false,
    });
    expect(first.spec.shards).toBeUndefined();
    expect(first.spec.dependsOn).toBeUndefined();
    expect(first.spec.env).toEqual({
      SEED: '7',
      TRAINYARD_SHARD_INDEX: '1',
      TRAINYARD_SHARD_COUNT: '3',
    });
    expect(job('job_x').status).toBe('running');
    expect(job('job_x').shardCount).toBe(3);
    // The array job itself is never placed: only its shards wait for places.
    expect(log.state.jobs.get('job_x_0')!.state.status).toBe('queued');
    succeed('job_x_0');
    succeed('job_x_2');
    await drain();
    expect(of('JobShardsEnded')).toHaveLength(0);
    succeed('job_x_1');
    await drain();
    expect(of('JobShardsEnded')).toMatchObject([
      {
        aggregateId: 'job_x',
        data: { status: 'succeeded', succeeded: 3, failed: 0, cancelled: 0 },
      },
    ]);
    expect(job('job_x').status).toBe('succeeded');
  });

  it('fails the array job once all shards ended when one failed; a cancelled shard alone cancels it', async () => {
    const failing = harness();
    failing.shards.caughtUp();
    failing.append('job_x', submitted());
    await drain();
    failing.fail('job_x_1');
    await drain();
    // The other shards run on: the array job waits for them.
    expect(failing.job('job_x').status).toBe('running');
    failing.succeed('job_x_0');
    failing.append('job_x_2', { type: 'JobCancelled', data: {} });
    await drain();
    const ended = failing.of('JobShardsEnded')[0] as StoredEvent<
      Extract<JobEvent, { type: 'JobShardsEnded' }>
    >;
    expect(ended.data).toMatchObject({ status: 'failed', succeeded: 1, failed: 1, cancelled: 1 });
    expect(ended.data.failure).toMatchObject({ reason: 'shardFailed', kind: 'user' });
    expect(ended.data.failure!.message).toContain('job_x_1');

    const cancelled = harness();
    cancelled.shards.caughtUp();
    cancelled.append('job_y', submitted({ shards: 2 }));
    await drain();
    cancelled.append('job_y_0', { type: 'JobCancelled', data: {} });
    cancelled.succeed('job_y_1');
    await drain();
    expect(cancelled.job('job_y').status).toBe('cancelled');
  });

  it('cancels every shard of a cancelled array job, and a shard submitted after it ended', async () => {
    const { log, shards, append, run, job, of } = harness();
    shards.caughtUp();
    append('job_x', submitted());
    await drain();
    run('job_x_0');
    append('job_x', { type: 'JobCancelled', data: {} });
    await drain();
    expect(job('job_x_0').cancelRequested).toBe(true);
    expect(job('job_x_1').status).toBe('cancelled');
    expect(job('job_x_2').status).toBe('cancelled');
    // A shard that a term had in flight when its array job ended never runs.
    append('job_x_7', {
      type: 'JobSubmitted',
      data: { owner: 'alice', spec: spec(), shardOf: { jobId: 'job_x', index: 7, count: 8 } },
    });
    await drain();
    expect(job('job_x_7').status).toBe('cancelled');
    expect(of('JobShardsEnded')).toHaveLength(0);
    expect(log.state.jobs.has('job_x')).toBe(false);
  });

  it('retries a shard that failed by the platform alone, and waits for it', async () => {
    const { shards, append, succeed, run, job, of } = harness();
    shards.caughtUp();
    append('job_x', submitted());
    await drain();
    succeed('job_x_0');
    succeed('job_x_2');
    run('job_x_1');
    const lost = {
      kind: 'system' as const,
      retryable: true,
      reason: 'workerLost',
      message: 'gone',
    };
    const retryAt = '2026-01-01T00:00:10.000Z';
    append('job_x_1', {
      type: 'JobAttemptFailed',
      data: {
        attemptId: 'a-job_x_1',
        exitCode: null,
        failure: lost,
        durationMs: 1,
        retry: { retryAt, backoffMs: 10_000 },
      },
    });
    await drain();
    expect(job('job_x_1').status).toBe('retrying');
    expect(['job_x_0', 'job_x_2'].map((id) => job(id).attempts.length)).toEqual([1, 1]);
    expect(job('job_x').status).toBe('running');
    const attemptId = 'a2-job_x_1';
    append('job_x_1', {
      type: 'JobAssigned',
      data: { attemptId, attempt: 2, workerId: 'w2', gpus: [0], vramBytes: 4, cpus: 0 },
    });
    append('job_x_1', { type: 'JobStarted', data: { attemptId } });
    append('job_x_1', { type: 'JobSucceeded', data: { attemptId, durationMs: 1 } });
    await drain();
    expect(of('JobShardsEnded')).toMatchObject([{ data: { status: 'succeeded', succeeded: 3 } }]);
  });

  it('gives the shards the priority the array job is given', async () => {
    const { shards, append, job } = harness();
    shards.caughtUp();
    append('job_x', submitted());
    await drain();
    append('job_x', { type: 'JobPriorityChanged', data: { priority: -5, previous: 0 } });
    await drain();
    expect([0, 1, 2].map((i) => job(`job_x_${i}`).spec!.priority)).toEqual([-5, -5, -5]);
  });

  it('keeps the shards at their array job’s priority, a new term too, and submits a shard the log lacks', async () => {
    const { log, shards, succeed, job, of } = harness();
    const shard = (index: number): DomainEvent => ({
      type: 'JobSubmitted',
      data: {
        owner: 'alice',
        spec: spec({ env: { TRAINYARD_SHARD_INDEX: String(index), TRAINYARD_SHARD_COUNT: '3' } }),
        shardOf: { jobId: 'job_x', index, count: 3 },
        build: false,
      },
    });
    // The last term recorded the change of priority, and the array job sharded without shard 1.
    log.append('job', 'job_x', submitted());
    log.append('job', 'job_x_0', shard(0));
    log.append('job', 'job_x_2', shard(2));
    log.append('job', 'job_x', { type: 'JobSharded', data: { count: 3 } });
    log.append('job', 'job_x', { type: 'JobPriorityChanged', data: { priority: -5, previous: 0 } });
    log.deliver();
    shards.caughtUp();
    await drain();
    expect([0, 2].map((i) => job(`job_x_${i}`).spec!.priority)).toEqual([-5, -5]);
    succeed('job_x_0');
    succeed('job_x_2');
    await drain();
    expect(of('JobShardsEnded')).toHaveLength(0);
    expect(job('job_x_1')).toMatchObject({
      status: 'queued',
      shardOf: { jobId: 'job_x', index: 1, count: 3 },
      spec: { priority: -5 },
    });
    succeed('job_x_1');
    await drain();
    expect(job('job_x').status).toBe('succeeded');
  });

  it('a new term finishes what the last left half done, and looks again when the log is away', async () => {
    const { log, clock, shards, append, job, warnings } = harness({ failCommands: 1 });
    // The last term submitted one shard and no more.
    log.append('job', 'job_x', submitted());
    log.append('job', 'job_x_0', {
      type: 'JobSubmitted',
      data: {
        owner: 'alice',
        spec: spec({ env: { SEED: '7', TRAINYARD_SHARD_INDEX: '0', TRAINYARD_SHARD_COUNT: '3' } }),
        shardOf: { jobId: 'job_x', index: 0, count: 3 },
        build: false,
      },
    });
    log.deliver();
    shards.caughtUp();
    await drain();
    expect(warnings).toEqual(['could not look at an array job']);
    clock.advance(1_000);
    await drain();
    expect(job('job_x').shardCount).toBe(3);
    expect(log.events.filter((e) => e.aggregateId === 'job_x_0')).toHaveLength(1);
    expect(job('job_x_2').shardOf).toEqual({ jobId: 'job_x', index: 2, count: 3 });
    append('job_x_0', { type: 'JobCancelled', data: {} });
    await drain();
    expect(job('job_x').status).toBe('running');
  });
});
