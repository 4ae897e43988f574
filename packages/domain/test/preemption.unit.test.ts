import { describe, expect, it } from 'vitest';
import type { JobEvent, JobSpec } from '@trainyard/events';
import { DomainError, emptyCluster, evolveCluster, plan, type JobCommand } from '../src/index.ts';
import {
  assigned,
  given,
  run as commit,
  spec,
  started,
  stored,
  submit,
  submitted,
  T0,
  when,
  worker,
} from './given.ts';

const preemptible = (over: Partial<JobSpec> = {}) => spec({ preemptible: true, ...over });
const running = (s: JobSpec): JobEvent[] => [submitted(s), assigned(), started()];
const preempted: JobEvent = {
  type: 'JobPreempted',
  data: { attemptId: 'a1', workerId: 'w1', by: 'job_urgent' },
};
const finish = (exitCode: number, stopped: boolean): JobCommand => ({
  type: 'FinishAttempt',
  attemptId: 'a1',
  exit: { kind: 'exited', exitCode },
  durationMs: 10,
  stopped,
  now: T0,
  jitter: 0,
});

function rejected(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err.code;
    throw err;
  }
  return 'accepted';
}

describe('preempting a job', () => {
  it('stops the running attempt of a preemptible job, once', () => {
    const preempt: JobCommand = { type: 'PreemptJob', attemptId: 'a1', by: 'job_urgent' };
    expect(when(running(preemptible()), preempt)).toEqual([preempted]);
    expect(when([...running(preemptible()), preempted], preempt)).toEqual([]);
    expect(rejected(() => when(running(spec()), preempt))).toBe('INVALID_TRANSITION');
    expect(rejected(() => when(running(preemptible()), { ...preempt, attemptId: 'a0' }))).toBe(
      'STALE_ATTEMPT',
    );
  });

  it('queues it again at once without spending a retry, however the stopped attempt exits', () => {
    for (const exitCode of [0, 143]) {
      const events = when(
        [...running(preemptible({ maxRetries: 0 })), preempted],
        finish(exitCode, true),
      );
      expect(events).toEqual([
        {
          type: 'JobAttemptFailed',
          data: {
            attemptId: 'a1',
            exitCode,
            failure: {
              kind: 'system',
              reason: 'preempted',
              retryable: true,
              message: 'stopped to make room for work of a higher priority',
            },
            durationMs: 10,
            retry: { retryAt: T0.toISOString(), backoffMs: 0 },
          },
        },
      ]);
      const after = given([...running(preemptible({ maxRetries: 0 })), preempted, ...events]);
      expect(after).toMatchObject({ status: 'retrying', preemptRequested: false });
    }
  });

  it('never starts an attempt preempted before it started: the job queues again', () => {
    const assignedOnly: JobEvent[] = [submitted(preemptible()), assigned(), preempted];
    const events = when(assignedOnly, { type: 'StartAttempt', attemptId: 'a1' });
    expect(events).toMatchObject([
      {
        type: 'JobAttemptFailed',
        data: { attemptId: 'a1', failure: { reason: 'preempted' }, retry: { backoffMs: 0 } },
      },
    ]);
    expect(given([...assignedOnly, ...events]).status).toBe('retrying');
  });

  it('lets one that succeeded by itself before it was stopped succeed', () => {
    const events = when([...running(preemptible()), preempted], finish(0, false));
    expect(events).toEqual([{ type: 'JobSucceeded', data: { attemptId: 'a1', durationMs: 10 } }]);
  });

  it('does not count preemptions against the retries of a later platform failure', () => {
    const s = preemptible({ maxRetries: 1 });
    const requeued = when([...running(s), preempted], finish(143, true));
    const again: JobEvent[] = [
      ...running(s),
      preempted,
      ...requeued,
      assigned('a2', 2),
      started('a2'),
    ];
    const lost = when(again, {
      type: 'FailAttempt',
      attemptId: 'a2',
      failure: { kind: 'system', reason: 'workerLost', message: 'gone', retryable: true },
      now: T0,
      jitter: 0,
    });
    expect(lost[0]?.type).toBe('JobAttemptFailed');
    expect(lost[0]?.type === 'JobAttemptFailed' && lost[0].data.retry).not.toBeNull();
  });
});

const whole = { resources: { gpus: 1, vramGb: 20 } };

describe('which attempts placement preempts', () => {
  it('stops preemptible work of a lower priority for the first job that waits, and only that', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    submit(c, 'keep', { ...whole, priority: -5 });
    submit(c, 'victim', { ...whole, priority: -5, preemptible: true });
    expect(commit(c)).toEqual(['keep', 'victim']);
    submit(c, 'peer', { ...whole, priority: -5 });
    expect(plan(c, T0).preemptions).toEqual([]);
    submit(c, 'urgent', { ...whole, priority: 0 });
    expect(plan(c, T0).preemptions).toEqual([
      { jobId: 'victim', attemptId: 'att-victim', workerId: 'w1', by: 'urgent' },
    ]);
    evolveCluster(
      c,
      stored('job', 'victim', {
        type: 'JobPreempted',
        data: { attemptId: 'att-victim', workerId: 'w1', by: 'urgent' },
      }),
    );
    // The room is on its way: nothing more is stopped while the victim stops.
    expect(plan(c, T0).preemptions).toEqual([]);
    evolveCluster(
      c,
      stored('job', 'victim', {
        type: 'JobAttemptFailed',
        data: {
          attemptId: 'att-victim',
          exitCode: 143,
          failure: { kind: 'system', reason: 'preempted', message: '', retryable: true },
          durationMs: 1,
          retry: { retryAt: T0.toISOString(), backoffMs: 0 },
        },
      }),
    );
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['urgent']);
  });

  it('never stops a gang, nor a member of one, even one a log marks preemptible', () => {
    const c = emptyCluster();
    // Workers that read dispatch version 5, which gangs need.
    worker(c, 'w1', [24], 0, 'sim', 'process', undefined, 5);
    worker(c, 'w2', [24], 0, 'sim', 'process', undefined, 5);
    // The API refuses a preemptible gang; a log from before it did may still hold one.
    submit(c, 'gang', { ...whole, nodes: 2, preemptible: true });
    expect(commit(c)).toEqual(['gang']);
    submit(c, 'urgent', { resources: { gpus: 1, vramGb: 20 }, priority: 5 });
    const { preemptions, reservation } = plan(c, T0);
    expect(preemptions).toEqual([]);
    expect(reservation).toBeNull();
  });

  it('weighs the next job that waits when nothing can be stopped for the first', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24], 0, 'A100');
    worker(c, 'w2', [24], 0, 'L4');
    submit(c, 'fixed', {
      ...whole,
      priority: -5,
      resources: { gpus: 1, vramGb: 20, gpuModel: 'A100' },
    });
    submit(c, 'victim', { ...whole, priority: -5, preemptible: true });
    expect(commit(c).sort()).toEqual(['fixed', 'victim']);
    // First in line, an A100 job: only `fixed`, which may not be stopped, holds one.
    submit(c, 'a100', { resources: { gpus: 1, vramGb: 20, gpuModel: 'A100' }, priority: 0 });
    submit(c, 'any', { ...whole, priority: 0 });
    const round = plan(c, T0);
    expect(round.preemptions).toEqual([
      { jobId: 'victim', attemptId: 'att-victim', workerId: 'w2', by: 'any' },
    ]);
    expect(round.reservation).toMatchObject({ id: 'any', workerId: 'w2' });
  });

  it('stops only what the job needs, and keeps the room it makes from later work', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    submit(c, 'fixed', { resources: { gpus: 1, vramGb: 8 }, priority: -1 });
    submit(c, 'sharer', { resources: { gpus: 1, vramGb: 8 }, priority: -9, preemptible: true });
    submit(c, 'mid', { ...whole, priority: -5, preemptible: true });
    expect(commit(c)).toEqual(['fixed', 'mid', 'sharer']);
    submit(c, 'urgent', { ...whole, priority: 0 });
    // `sharer` is of a lower priority, but its GPU stays taken by `fixed`: stopping it frees nothing.
    expect(plan(c, T0).preemptions.map((p) => p.jobId)).toEqual(['mid']);

    const d = emptyCluster();
    worker(d, 'w1', [24, 24]);
    submit(d, 'old', { ...whole, priority: -1, preemptible: true });
    commit(d);
    submit(d, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 0 });
    submit(d, 'filler', { ...whole, priority: -1 });
    const round = plan(d, T0);
    expect(round.preemptions.map((p) => p.jobId)).toEqual(['old']);
    expect(round.assignments).toEqual([]);
    expect(round.reservation).toMatchObject({ id: 'pair', gpus: [0, 1], stops: 1 });
  });

  it('stops the fewest attempts it can, the lowest priority first, and none that would not do', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    worker(c, 'w2', [24, 24]);
    submit(c, 'w1_a', { ...whole, priority: -9, preemptible: true });
    submit(c, 'w1_b', { ...whole, priority: -9, preemptible: true });
    submit(c, 'w2_a', { ...whole, priority: -8, preemptible: true });
    submit(c, 'w2_b', { resources: { gpus: 1, vramGb: 20 }, priority: -7, preemptible: true });
    commit(c);
    submit(c, 'one', { ...whole, priority: 0 });
    expect(plan(c, T0).preemptions.map((p) => p.jobId)).toEqual(['w1_a']);
    const big = emptyCluster();
    worker(big, 'w1', [24, 24]);
    submit(big, 'fixed', { ...whole, priority: -9 });
    submit(big, 'loose', { ...whole, priority: -9, preemptible: true });
    commit(big);
    submit(big, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 0 });
    expect(plan(big, T0).preemptions).toEqual([]);
  });
});
