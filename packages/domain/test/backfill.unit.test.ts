import { describe, expect, it } from 'vitest';
import type { JobSpec, SessionEvent } from '@trainyard/events';
import {
  describePending,
  emptyCluster,
  evolveCluster,
  explainQueue,
  GiB,
  plan,
  restoreCluster,
  snapshotCluster,
  type ClusterState,
} from '../src/index.ts';
import { run as commit, stored, submit, succeed as finish, T0, worker } from './given.ts';

const HOUR = 3_600_000;
const at = (ms: number) => new Date(T0.getTime() + ms);

/** A job of 20 GiB on one GPU of 24: one to a GPU. */
const oneGpu = (over: Partial<JobSpec> = {}): Partial<JobSpec> => ({
  resources: { gpus: 1, vramGb: 20 },
  ...over,
});

const reasons = (c: ClusterState, when = T0) =>
  new Map(explainQueue(c, when).entries.map((e) => [e.id, describePending(e)]));

describe('backfill with a reservation', () => {
  it('keeps room for the first job that waits, and lets only work that ends before it is due start there', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24, 24]);
    submit(c, 'run_1h', oneGpu({ timeLimit: 3600 }));
    submit(c, 'run_2h', oneGpu({ timeLimit: 7200 }));
    expect(commit(c)).toEqual(['run_1h', 'run_2h']);
    submit(c, 'big', { resources: { gpus: 4, vramGb: 20 }, priority: 10 });
    submit(c, 'long', oneGpu());
    submit(c, 'short', oneGpu({ timeLimit: 3600 }));
    const round = plan(c, T0);
    expect(round.reservation).toMatchObject({ id: 'big', workerId: 'w1', gpus: [0, 1, 2, 3] });
    expect(round.reservation?.atMs).toBe(at(2 * HOUR).getTime());
    expect(round.assignments.map((a) => [a.id, a.gpus])).toEqual([['short', [2]]]);
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect(plan(restored, T0)).toEqual(round);

    const why = reasons(c);
    expect(why.get('big')).toMatchObject({
      reason: 'resources',
      expectedStart: at(2 * HOUR).toISOString(),
    });
    expect(why.get('big')?.message).toContain(
      `room is reserved for it on w1, where running work reaches its time limits by ${at(2 * HOUR).toISOString()}`,
    );
    expect(why.get('long')).toMatchObject({ reason: 'reserved', expectedStart: null });
    expect(why.get('long')?.message).toBe(
      `it could start now, but only on what is reserved for big (first in line, due to start by ${at(2 * HOUR).toISOString()} on w1), and it could still run then: a time limit that ends it before then lets it start now`,
    );
    expect(why.get('short')?.reason).toBe('placing');
  });

  it('never delays the job it reserves for: it starts when the work before it reaches its limits', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24, 24]);
    submit(c, 'run_1h', oneGpu({ timeLimit: 3600 }));
    submit(c, 'run_2h', oneGpu({ timeLimit: 7200 }));
    commit(c);
    submit(c, 'big', { resources: { gpus: 4, vramGb: 20 }, priority: 10 });
    for (let i = 0; i < 3; i++) submit(c, `long_${i}`, oneGpu());
    submit(c, 'short', oneGpu({ timeLimit: 1800 }));
    expect(commit(c, T0)).toEqual(['short']);
    finish(c, 'short', at(HOUR / 2));
    finish(c, 'run_1h', at(HOUR));
    // Three GPUs are idle, but whatever goes on them would still run when `big` is due.
    expect(commit(c, at(HOUR))).toEqual([]);
    expect(reasons(c, at(HOUR)).get('long_0')?.reason).toBe('reserved');
    finish(c, 'run_2h', at(2 * HOUR));
    expect(commit(c, at(2 * HOUR))).toEqual(['big']);
  });

  it('lets later work use what the reservation does not keep, on its worker or another', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    worker(c, 'w2', [24, 24]);
    submit(c, 'ends', oneGpu({ timeLimit: 3600 }));
    submit(c, 'fill', oneGpu({ timeLimit: 60 }));
    submit(c, 'endless', oneGpu());
    expect(commit(c)).toEqual(['ends', 'fill', 'endless']);
    finish(c, 'fill', at(60_000));
    submit(c, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 10 });
    submit(c, 'late_1', oneGpu());
    submit(c, 'late_2', oneGpu());
    const round = plan(c, at(60_000));
    expect(round.reservation).toMatchObject({ id: 'pair', workerId: 'w1', gpus: [0, 1] });
    expect(round.assignments.map((a) => [a.id, a.workerId])).toEqual([['late_1', 'w2']]);
    expect(reasons(c, at(60_000)).get('late_2')?.reason).toBe('reserved');
  });

  it('reserves nothing where what runs has no time limit: later work that fits starts, as before', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    submit(c, 'endless', oneGpu());
    commit(c);
    submit(c, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 10 });
    submit(c, 'single', oneGpu());
    const round = plan(c, T0);
    expect(round.reservation).toBeNull();
    expect(round.assignments.map((a) => a.id)).toEqual(['single']);
    const why = reasons(c);
    expect(why.get('pair')).toMatchObject({ reason: 'resources', expectedStart: null });
    expect(why.get('pair')?.message).not.toContain('reserved');
  });

  it('counts a session as ending at its maximum life, and a cancelled attempt as ending now', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    const timers = { connectMin: 10, idleMin: 30, maxMin: 90 };
    const session: SessionEvent[] = [
      {
        type: 'SessionRequested',
        data: { owner: 'bob', spec: { resources: { gpus: 1, vramGb: 20 }, timers: {} }, timers },
      },
      {
        type: 'SessionAssigned',
        data: { runId: 'r1', run: 1, workerId: 'w1', gpus: [0], vramBytes: 20 * GiB, cpus: 0 },
      },
      { type: 'SessionStarted', data: { runId: 'r1' } },
    ];
    for (const e of session) evolveCluster(c, stored('session', 'ses_1', e));
    submit(c, 'endless', oneGpu());
    commit(c);
    submit(c, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 10 });
    // The endless job's GPU never frees: nothing can be reserved.
    expect(plan(c, T0).reservation).toBeNull();
    evolveCluster(
      c,
      stored('job', 'endless', {
        type: 'JobCancelRequested',
        data: { attemptId: 'att-endless', workerId: 'w1' },
      }),
    );
    const round = plan(c, at(HOUR));
    expect(round.reservation).toMatchObject({ id: 'pair', gpus: [0, 1] });
    expect(round.reservation?.atMs).toBe(at(90 * 60_000).getTime());
  });
});
