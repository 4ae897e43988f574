import { describe, expect, it } from 'vitest';
import type { JobSpec } from '@trainyard/events';
import {
  emptyCluster,
  evolveCluster,
  GiB,
  plan,
  type ClusterState,
  type JobState,
} from '../src/index.ts';
import { spec, stored, T0 } from './given.ts';

/** Placement by what probes measured: VRAM shared by measure, host memory counted. */
const unmeasured = spec({ resources: { gpus: 1 } });

describe('placement by measured memory', () => {
  function cluster(gpuGb: number[], memoryGb?: number, dispatchVersion = 2): ClusterState {
    const c = emptyCluster();
    evolveCluster(
      c,
      stored('worker', 'w1', {
        type: 'WorkerRegistered',
        data: {
          name: 'w1',
          hostname: 'h',
          cpuSlots: 2,
          ...(memoryGb && { memoryBytes: memoryGb * GiB }),
          runtime: 'process',
          limitsMemory: true,
          version: 't',
          ...(dispatchVersion > 1 && { dispatchVersion }),
          gpus: gpuGb.map((gb, index) => ({
            index,
            name: 'sim',
            uuid: `w1-${index}`,
            vramBytes: gb * GiB,
            simulated: true,
          })),
        },
      }),
    );
    return c;
  }

  /** Submits a job, runs its probe on GPU 0 and records what the probe measured. */
  function measured(c: ClusterState, id: string, vramGb: number, ramGb = 1) {
    evolveCluster(
      c,
      stored('job', id, {
        type: 'JobSubmitted',
        data: { owner: 'u', spec: unmeasured, estimate: true },
      }),
    );
    const probe = { gpus: [0], vramBytes: 10 * GiB };
    for (const event of [
      {
        type: 'JobAssigned',
        data: {
          attemptId: `p-${id}`,
          attempt: 1,
          workerId: 'w1',
          gpus: probe.gpus,
          vramBytes: probe.vramBytes,
          cpus: 0,
          probe: true,
        },
      },
      { type: 'JobStarted', data: { attemptId: `p-${id}` } },
      {
        type: 'JobEstimated',
        data: {
          attemptId: `p-${id}`,
          durationMs: 1,
          estimate: {
            vramBytes: vramGb * GiB,
            ramBytes: ramGb * GiB,
            stepMs: 1,
            steps: 3,
            device: 'cuda',
          },
        },
      },
    ])
      evolveCluster(c, stored('job', id, event));
    expect((c.jobs.get(id)!.state as JobState).status).toBe('queued');
  }

  it('shares one 10 GiB GPU between jobs measured at 3 and 5 GiB, and a third waits', () => {
    const c = cluster([10]);
    measured(c, 'three', 3);
    measured(c, 'five', 5);
    measured(c, 'another', 3);
    const placed = plan(c, T0).assignments;
    // Each takes what it measured and the CUDA context's allowance (half a GiB).
    expect(placed.map((a) => [a.id, a.gpus, a.vramBytes / GiB])).toEqual([
      ['three', [0], 3.5],
      ['five', [0], 5.5],
    ]);
  });

  it('probes on the free GPU with the most memory, and not on one that a job uses', () => {
    const c = cluster([16, 80, 40]);
    evolveCluster(
      c,
      stored('job', 'j', {
        type: 'JobSubmitted',
        data: { owner: 'u', spec: unmeasured, estimate: true },
      }),
    );
    expect(plan(c, T0).assignments).toEqual([
      { kind: 'job', id: 'j', workerId: 'w1', gpus: [1], vramBytes: 80 * GiB, cpus: 0 },
    ]);
    evolveCluster(
      c,
      stored('job', 'k', {
        type: 'JobSubmitted',
        data: { owner: 'u', spec: spec({ resources: { gpus: 1, vramGb: 1 } }) },
      }),
    );
    evolveCluster(
      c,
      stored('job', 'k', {
        type: 'JobAssigned',
        data: { attemptId: 'k1', attempt: 1, workerId: 'w1', gpus: [1], vramBytes: GiB, cpus: 0 },
      }),
    );
    expect(plan(c, T0).assignments.map((a) => a.gpus)).toEqual([[2]]);
  });

  it('takes a GPU whole for a job submitted before probes, which declares no VRAM', () => {
    const c = cluster([24]);
    evolveCluster(
      c,
      stored('job', 'old', { type: 'JobSubmitted', data: { owner: 'u', spec: unmeasured } }),
    );
    expect(c.jobs.get('old')!.state.status).toBe('queued');
    expect(plan(c, T0).assignments).toEqual([
      { kind: 'job', id: 'old', workerId: 'w1', gpus: [0], vramBytes: 24 * GiB, cpus: 0 },
    ]);
  });

  it('counts the host memory a job measured or asked for, where the worker counts it', () => {
    const c = cluster([80], 16);
    measured(c, 'ram-9', 1, 9);
    measured(c, 'ram-8', 1, 8);
    evolveCluster(
      c,
      stored('job', 'cpu-6', {
        type: 'JobSubmitted',
        data: { owner: 'u', spec: spec({ resources: { gpus: 0, memoryGb: 6 } }) },
      }),
    );
    // 9 GiB placed, 8 more would not fit in 16, and the 6 GiB CPU job does.
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['ram-9', 'cpu-6']);
    const uncounted = cluster([80]);
    measured(uncounted, 'ram-9', 1, 9);
    measured(uncounted, 'ram-8', 1, 8);
    expect(plan(uncounted, T0).assignments.map((a) => a.id)).toEqual(['ram-9', 'ram-8']);
  });

  it('frees the memory an attempt held when it ends', () => {
    const c = cluster([80], 16);
    measured(c, 'ram-9', 1, 9);
    measured(c, 'ram-8', 1, 8);
    const [first] = plan(c, T0).assignments;
    const held = (data: object) => evolveCluster(c, stored('job', 'ram-9', data as never));
    held({
      type: 'JobAssigned',
      data: {
        attemptId: 'r9',
        attempt: 2,
        workerId: 'w1',
        gpus: first!.gpus,
        vramBytes: first!.vramBytes,
        cpus: 0,
      },
    });
    expect(c.workers.get('w1')!.memoryUsed).toBe(9 * GiB);
    expect(plan(c, T0).assignments).toEqual([]);
    held({ type: 'JobSucceeded', data: { attemptId: 'r9', durationMs: 1 } });
    expect(c.workers.get('w1')!.memoryUsed).toBe(0);
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['ram-8']);
  });

  const submit = (c: ClusterState, id: string, s: JobSpec, estimate?: boolean) =>
    evolveCluster(
      c,
      stored('job', id, {
        type: 'JobSubmitted',
        data: { owner: 'u', spec: s, ...(estimate !== undefined && { estimate }) },
      }),
    );

  it('gives a job measured at nearly a whole GPU a whole idle one, and one that used no CUDA the context’s allowance', () => {
    const c = cluster([80, 80]);
    measured(c, 'huge', 79.6);
    measured(c, 'cpu-only', 0);
    expect(plan(c, T0).assignments.map((a) => [a.id, a.gpus, a.vramBytes / GiB])).toEqual([
      ['huge', [0], 80],
      ['cpu-only', [1], 0.5],
    ]);
  });

  it('places a job that asks more memory than a host has on a host nothing else uses', () => {
    const c = cluster([80], 16);
    submit(c, 'big', spec({ resources: { gpus: 0, memoryGb: 64 } }), false);
    submit(c, 'small', spec({ resources: { gpus: 0, memoryGb: 1 } }), false);
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['big']);
  });

  it('sends a probe only to a worker that reads the dispatch contract of probes', () => {
    const old = cluster([80], undefined, 1);
    submit(old, 'j', unmeasured, true);
    submit(old, 'declared', spec({ resources: { gpus: 1, vramGb: 4 } }), false);
    expect(plan(old, T0).assignments.map((a) => a.id)).toEqual(['declared']);
  });

  it('keeps a probed job’s place in the queue from its submission', () => {
    const c = cluster([10]);
    submit(c, 'first', unmeasured, true);
    submit(c, 'second', spec({ resources: { gpus: 1, vramGb: 6 } }), false);
    for (const event of [
      {
        type: 'JobAssigned',
        data: {
          attemptId: 'p',
          attempt: 1,
          workerId: 'w1',
          gpus: [0],
          vramBytes: 10 * GiB,
          cpus: 0,
          probe: true,
        },
      },
      { type: 'JobStarted', data: { attemptId: 'p' } },
      {
        type: 'JobEstimated',
        data: {
          attemptId: 'p',
          durationMs: 1,
          estimate: { vramBytes: 6 * GiB, ramBytes: 0, stepMs: 1, steps: 3, device: 'cuda' },
        },
      },
    ])
      evolveCluster(c, stored('job', 'first', event));
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['first']);
  });
});
