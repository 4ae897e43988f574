import { describe, expect, it } from 'vitest';
import type { JobEvent } from '@trainyard/events';
import {
  awaitsPlacement,
  DomainError,
  describePending,
  emptyCluster,
  evolveCluster,
  explainQueue,
  plan,
  type ClusterState,
} from '../src/index.ts';
import {
  assigned,
  given,
  spec,
  started,
  stored,
  submit,
  submitted,
  T0,
  when,
  worker,
} from './given.ts';

const held = (by: 'owner' | 'admin', reason = ''): JobEvent => ({
  type: 'JobHeld',
  data: { by, reason },
});
const released: JobEvent = { type: 'JobReleased', data: {} };

const rejected = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(DomainError);
    return (err as DomainError).code;
  }
  throw new Error('expected a rejection');
};

describe('holding a job', () => {
  it('holds a waiting job out of placement until it is released', () => {
    const hold = when([submitted()], { type: 'HoldJob', by: 'owner', reason: 'data not ready' });
    expect(hold).toEqual([held('owner', 'data not ready')]);
    const state = given([submitted(), ...hold]);
    expect(state.held).toEqual({ by: 'owner', reason: 'data not ready' });
    expect(awaitsPlacement(state)).toBe(false);
    expect(
      rejected(() =>
        when([submitted(), ...hold], {
          type: 'AssignJob',
          attemptId: 'a1',
          workerId: 'w1',
          gpus: [0],
          vramBytes: 1,
          cpus: 0,
        }),
      ),
    ).toBe('INVALID_TRANSITION');
    const release = when([submitted(), ...hold], { type: 'ReleaseJob', by: 'owner' });
    expect(release).toEqual([released]);
    expect(awaitsPlacement(given([submitted(), ...hold, ...release]))).toBe(true);
  });

  it('submits a job held, in its one JobSubmitted: it is never placeable in between', () => {
    const events = when([], { type: 'SubmitJob', owner: 'alice', spec: spec(), hold: 'owner' });
    expect(events).toMatchObject([{ type: 'JobSubmitted', data: { hold: 'owner' } }]);
    const state = given(events);
    expect([state.status, state.held, awaitsPlacement(state)]).toEqual([
      'queued',
      { by: 'owner', reason: '' },
      false,
    ]);
  });

  it('says a hold or a release once, and lets an admin’s hold stand over its owner’s', () => {
    const byOwner = [submitted(), held('owner')];
    expect(when(byOwner, { type: 'HoldJob', by: 'owner', reason: 'again' })).toEqual([]);
    expect(when(byOwner, { type: 'HoldJob', by: 'admin', reason: 'maintenance' })).toEqual([
      held('admin', 'maintenance'),
    ]);
    const byAdmin = [submitted(), held('admin', 'maintenance')];
    expect(when(byAdmin, { type: 'HoldJob', by: 'owner', reason: '' })).toEqual([]);
    expect(rejected(() => when(byAdmin, { type: 'ReleaseJob', by: 'owner' }))).toBe(
      'HELD_BY_ADMIN',
    );
    expect(when(byAdmin, { type: 'ReleaseJob', by: 'admin' })).toEqual([released]);
    expect(when([submitted()], { type: 'ReleaseJob', by: 'owner' })).toEqual([]);
  });

  it('refuses to hold a job that runs or has ended', () => {
    const running = [submitted(), assigned(), started()];
    expect(rejected(() => when(running, { type: 'HoldJob', by: 'owner', reason: '' }))).toBe(
      'INVALID_TRANSITION',
    );
    const cancelled = [submitted(), { type: 'JobCancelled' as const, data: {} }];
    expect(rejected(() => when(cancelled, { type: 'HoldJob', by: 'admin', reason: '' }))).toBe(
      'JOB_FINISHED',
    );
    expect(rejected(() => when(cancelled, { type: 'ReleaseJob', by: 'admin' }))).toBe(
      'JOB_FINISHED',
    );
  });

  it('may hold a job whose probe runs: measured, it then waits held', () => {
    const probing = [
      submitted(spec({ resources: { gpus: 1 } })),
      { ...assigned(), data: { ...assigned().data, probe: true } } as JobEvent,
    ];
    expect(when(probing, { type: 'HoldJob', by: 'owner', reason: '' })).toEqual([held('owner')]);
  });
});

describe('a held job in the queue', () => {
  const hold = (c: ClusterState, id: string, by: 'owner' | 'admin', reason = '') =>
    evolveCluster(c, stored('job', id, held(by, reason)));
  const placed = (c: ClusterState) => plan(c, T0).assignments.map((a) => a.id);

  it('is not placed, is listed as held, and once released queues behind what queued meanwhile', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'job_1', { resources: { gpus: 1, vramGb: 20 } });
    hold(c, 'job_1', 'owner', 'data not ready');
    submit(c, 'job_2', { resources: { gpus: 1, vramGb: 20 } }, 'bob');
    expect(placed(c)).toEqual(['job_2']);
    const entries = explainQueue(c, T0).entries;
    expect(entries.map((e) => [e.id, e.reason, e.position])).toEqual([
      ['job_2', 'placing', 1],
      ['job_1', 'held', null],
    ]);
    expect(describePending(entries[1]!).message).toBe(
      'held by alice (data not ready): `trainyard release job_1` lets it queue',
    );
    evolveCluster(c, stored('job', 'job_1', released));
    expect(explainQueue(c, T0).entries.map((e) => e.id)).toEqual(['job_2', 'job_1']);
    expect(placed(c)).toEqual(['job_2']);
  });

  it('tells who holds it when an admin does', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'job_1', { resources: { gpus: 1, vramGb: 20 } });
    hold(c, 'job_1', 'admin', 'maintenance');
    expect(placed(c)).toEqual([]);
    const [entry] = explainQueue(c, T0).entries;
    expect(describePending(entry!)).toMatchObject({
      reason: 'held',
      message: 'held by an admin (maintenance): only an admin may release it',
    });
  });
});
