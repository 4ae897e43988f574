import { describe, expect, it } from 'vitest';
import {
  describePending,
  emptyCluster,
  evolveCluster,
  explainQueue,
  holderOf,
  plan,
  restoreCluster,
  snapshotCluster,
  type ClusterState,
} from '../src/index.ts';
import { commit, stored, submit, T0, worker } from './given.ts';

const quota = (c: ClusterState, user: string, maxGpus: number | null) =>
  evolveCluster(c, stored('user', user, { type: 'UserQuotaSet', data: { maxGpus } }));

const placed = (c: ClusterState) =>
  plan(c, T0)
    .assignments.map((a) => a.id)
    .sort();

const oneGpu = { resources: { gpus: 1, vramGb: 20 } };

describe('GPU quotas', () => {
  it('holds back what would take a user past their quota, and nobody else’s work of its shape', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24, 24]);
    quota(c, 'alice', 2);
    for (const id of ['job_a1', 'job_a2', 'job_a3']) submit(c, id, oneGpu, 'alice');
    submit(c, 'job_b1', oneGpu, 'bob');
    expect(placed(c)).toEqual(['job_a1', 'job_a2', 'job_b1']);
    commit(c);
    const [entry] = explainQueue(c, T0).entries;
    expect(describePending(entry!)).toMatchObject({
      id: 'job_a3',
      reason: 'overQuota',
      message:
        "over alice's quota: their work holds 2 GPUs of the 2 it may hold at once (with what the next round places), and this needs 1 more",
    });
    expect(placed(c)).toEqual([]);
  });

  it('lets the work that waited go once the user’s work ends, or the quota is lifted', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24, 24]);
    quota(c, 'alice', 1);
    submit(c, 'job_a1', oneGpu, 'alice');
    submit(c, 'job_a2', oneGpu, 'alice');
    submit(c, 'job_a3', oneGpu, 'alice');
    commit(c);
    expect(explainQueue(c, T0).entries.map((e) => [e.id, e.reason])).toEqual([
      ['job_a2', 'overQuota'],
      ['job_a3', 'overQuota'],
    ]);
    evolveCluster(
      c,
      stored('job', 'job_a1', {
        type: 'JobSucceeded',
        data: { attemptId: 'att-job_a1', durationMs: 1 },
      }),
    );
    expect(placed(c)).toEqual(['job_a2']);
    commit(c);
    quota(c, 'alice', null);
    expect(placed(c)).toEqual(['job_a3']);
  });

  it('says when a job asks for more than its owner’s quota, and when no worker could hold it anyway', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    quota(c, 'alice', 1);
    submit(c, 'job_two', { resources: { gpus: 2, vramGb: 20 } }, 'alice');
    submit(c, 'job_huge', { resources: { gpus: 4, vramGb: 20 } }, 'alice');
    expect(
      explainQueue(c, T0)
        .entries.map(describePending)
        .map((e) => [e.id, e.reason, e.message]),
    ).toEqual([
      [
        'job_two',
        'overQuota',
        "it asks for 2 GPUs, more than alice's quota of 1 at once: it runs only if an admin raises the quota",
      ],
      [
        'job_huge',
        'unsatisfiable',
        'no online worker could ever hold it: it needs 4 GPUs with 20 GiB free',
      ],
    ]);
  });

  it('counts GPUs only: CPU jobs run whatever the quota, and a job larger than it waits', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24], 2);
    quota(c, 'alice', 0);
    submit(c, 'job_cpu', { resources: { gpus: 0 } }, 'alice');
    submit(c, 'job_gpu', oneGpu, 'alice');
    expect(placed(c)).toEqual(['job_cpu']);
    quota(c, 'alice', 1);
    submit(c, 'job_two', { resources: { gpus: 2, vramGb: 20 } }, 'alice');
    expect(placed(c)).toEqual(['job_cpu', 'job_gpu']);
  });

  it('keeps quotas, and what each user holds, through a snapshot and a worker registering again', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24]);
    quota(c, 'alice', 3);
    quota(c, 'bob', 1);
    quota(c, 'bob', null);
    submit(c, 'job_a1', oneGpu, 'alice');
    submit(c, 'job_a2', { resources: { gpus: 2, vramGb: 20 } }, 'alice');
    commit(c);
    expect([...c.gpusHeld]).toEqual([['alice', 3]]);
    worker(c, 'w1', [24, 24, 24]);
    expect([...c.gpusHeld]).toEqual([['alice', 3]]);
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect([...restored.quotas]).toEqual([['alice', 3]]);
    expect([...restored.gpusHeld]).toEqual([['alice', 3]]);
  });

  it('tells each user what they hold against their quota, nothing held included', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24]);
    quota(c, 'alice', 2);
    quota(c, 'carol', 4);
    submit(c, 'job_a1', oneGpu, 'alice');
    submit(c, 'job_b1', oneGpu, 'bob');
    commit(c);
    const view = explainQueue(c, T0);
    expect(view.holders).toEqual([
      {
        owner: 'alice',
        gpus: 1,
        cpus: 0,
        jobs: 1,
        sessions: 0,
        maxGpus: 2,
        gpuHours: 0,
        maxGpuHours: null,
      },
      {
        owner: 'bob',
        gpus: 1,
        cpus: 0,
        jobs: 1,
        sessions: 0,
        maxGpus: null,
        gpuHours: 0,
        maxGpuHours: null,
      },
    ]);
    expect(holderOf(view, 'carol')).toEqual({
      owner: 'carol',
      gpus: 0,
      cpus: 0,
      jobs: 0,
      sessions: 0,
      maxGpus: 4,
      gpuHours: 0,
      maxGpuHours: null,
    });
    expect(holderOf(view, 'dave').maxGpus).toBeNull();
  });
});
