import { describe, expect, it } from 'vitest';
import type { JobSpec, PendingReason } from '@trainyard/events';
import {
  emptyCluster,
  evolveCluster,
  describePending,
  explainQueue,
  GiB,
  jobNeed,
  noWorkerCouldHold,
  type ClusterState,
} from '../src/index.ts';
import { commit, spec, stored, submit, T0, worker } from './given.ts';

const reasons = (c: ClusterState) =>
  explainQueue(c, T0).entries.map(
    (e) => [e.id, e.position, e.reason] as [string, number | null, PendingReason],
  );

describe('why a job waits', () => {
  it('orders the queue by priority and says which are placed next, which wait and for what', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    submit(c, 'job_running', { resources: { gpus: 2, vramGb: 20 } });
    commit(c);
    submit(c, 'job_big', { resources: { gpus: 2, vramGb: 20 } });
    submit(c, 'job_big2', { resources: { gpus: 2, vramGb: 20 } });
    submit(c, 'job_urgent', { resources: { gpus: 1, vramGb: 20 }, priority: 50 });
    submit(c, 'job_huge', { resources: { gpus: 4, vramGb: 20 } });
    submit(c, 'job_cpu', { resources: { gpus: 0 } });
    expect(reasons(c)).toEqual([
      ['job_urgent', 1, 'resources'],
      ['job_big', 2, 'resources'],
      ['job_big2', 3, 'priority'],
      ['job_huge', 4, 'unsatisfiable'],
      ['job_cpu', 5, 'unsatisfiable'],
    ]);
    const view = explainQueue(c, T0);
    const byId = new Map(view.entries.map((e) => [e.id, describePending(e)]));
    expect(byId.get('job_big2')?.message).toBe(
      'waiting for room behind 1 earlier entry of the queue that need the same (2 GPUs with 20 GiB free)',
    );
    expect(byId.get('job_huge')?.message).toBe(
      'no online worker could ever hold it: it needs 4 GPUs with 20 GiB free',
    );
    expect(byId.get('job_urgent')).toMatchObject({
      priority: 50,
      effectivePriority: 50,
      owner: 'alice',
      status: 'queued',
    });
    expect(view.holders).toEqual([
      {
        owner: 'alice',
        gpus: 2,
        cpus: 0,
        jobs: 1,
        sessions: 0,
        maxGpus: null,
        gpuHours: 0,
        maxGpuHours: null,
      },
    ]);
  });

  it('says what a round would place, and flags what no worker online holds when workers go', () => {
    const c = emptyCluster();
    expect(explainQueue(c, T0).entries).toEqual([]);
    submit(c, 'job_a', { resources: { gpus: 1, vramGb: 8 } });
    expect(reasons(c)).toEqual([['job_a', 1, 'noWorkers']]);
    worker(c, 'w1', [24]);
    expect(reasons(c)).toEqual([['job_a', 1, 'placing']]);
    evolveCluster(c, stored('worker', 'w1', { type: 'WorkerLeft', data: { reason: 'drained' } }));
    worker(c, 'w2', [4]);
    expect(reasons(c)).toEqual([['job_a', 1, 'unsatisfiable']]);
  });

  it('lists what waits for something other than room after the queue: dependencies, builds, retries', () => {
    const c = emptyCluster();
    worker(c, 'w1', [], 1);
    submit(c, 'job_first', { resources: { gpus: 0 } });
    submit(c, 'job_after', { resources: { gpus: 0 }, dependsOn: ['job_first'] });
    evolveCluster(
      c,
      stored('job', 'job_built', {
        type: 'JobSubmitted',
        data: { owner: 'bob', spec: spec({ resources: { gpus: 0 } }), build: true },
      }),
    );
    const view = explainQueue(c, T0);
    expect(
      view.entries.map(describePending).map((e) => [e.id, e.position, e.reason, e.message]),
    ).toEqual([
      ['job_first', 1, 'placing', 'it fits now: the scheduler places it in its next round'],
      ['job_after', null, 'dependency', 'waiting for job_first to succeed'],
      ['job_built', null, 'building', 'waiting for a builder'],
    ]);
  });

  it('refuses at submit only what no registered worker could ever hold', () => {
    const w = {
      id: 'w1',
      cpuSlots: 4,
      memoryBytes: 64 * GiB,
      limitsMemory: false,
      runtime: 'process',
      dispatchVersion: 4,
      gpus: [0, 1].map((index) => ({ index, name: 'NVIDIA A100-SXM4-80GB', vramBytes: 80 * GiB })),
    };
    const holds = (s: Partial<JobSpec>, workers = [w]) =>
      !noWorkerCouldHold(jobNeed(spec(s)), workers);
    expect(holds({ resources: { gpus: 2, vramGb: 70 } })).toBe(true);
    expect(holds({ resources: { gpus: 3, vramGb: 1 } })).toBe(false);
    expect(holds({ resources: { gpus: 1, vramGb: 80 } })).toBe(false);
    expect(holds({ resources: { gpus: 1, gpuModel: 'H100' } })).toBe(false);
    expect(holds({ resources: { gpus: 1, gpuModel: 'a100' } })).toBe(true);
    expect(holds({ resources: { gpus: 0, cpus: 5 } })).toBe(false);
    expect(holds({ resources: { gpus: 0, memoryGb: 1 } })).toBe(false);
    expect(holds({ resources: { gpus: 1 }, image: 'python' })).toBe(false);
    expect(holds({ resources: { gpus: 8, vramGb: 1 } }, [])).toBe(true);
  });
});
