import { describe, expect, it } from 'vitest';
import type { JobSpec } from '@trainyard/events';
import {
  DEFAULT_POLICY,
  effectivePriority,
  emptyCluster,
  evolveCluster,
  GiB,
  plan,
  restoreCluster,
  snapshotCluster,
  staleAttempts,
  type ClusterSnapshot,
  type ClusterState,
} from '../src/index.ts';
import { spec, stored, T0, worker } from './given.ts';

function submit(cluster: ClusterState, id: string, s: Partial<JobSpec>, at = T0) {
  evolveCluster(
    cluster,
    stored('job', id, { type: 'JobSubmitted', data: { owner: 'u', spec: spec(s) } }, at),
  );
}

function commit(cluster: ClusterState, now = T0) {
  const { assignments } = plan(cluster, now);
  assignments.forEach((a, i) =>
    evolveCluster(
      cluster,
      stored('job', a.id, {
        type: 'JobAssigned',
        data: {
          attemptId: `att-${a.id}-${i}`,
          attempt: 1,
          workerId: a.workerId,
          gpus: a.gpus,
          vramBytes: a.vramBytes,
          cpus: a.cpus,
        },
      }),
    ),
  );
  return assignments;
}

/** Cancels a job that waits: it ends, and leaves the queue. */
function cancel(cluster: ClusterState, id: string) {
  evolveCluster(cluster, stored('job', id, { type: 'JobCancelled', data: {} }));
}

/** Ends the attempts `commit` made: they start, then succeed, freeing their places. */
function finish(cluster: ClusterState, assignments: { id: string }[]) {
  assignments.forEach(({ id }, i) => {
    const attemptId = `att-${id}-${i}`;
    evolveCluster(cluster, stored('job', id, { type: 'JobStarted', data: { attemptId } }));
    const ended = { type: 'JobSucceeded', data: { attemptId, durationMs: 1 } };
    evolveCluster(cluster, stored('job', id, ended));
  });
}

describe('placement policy v1', () => {
  it('places a job that names a GPU model only on GPUs of that model, by name without case', () => {
    const c = emptyCluster();
    worker(c, 'a-l4', [24], 0, 'NVIDIA L4');
    worker(c, 'b-a100', [80, 80], 0, 'NVIDIA A100-SXM4-80GB');
    submit(c, 'wants-a100', { resources: { gpus: 2, vramGb: 10, gpuModel: 'a100' } });
    submit(c, 'wants-h100', { resources: { gpus: 1, gpuModel: 'H100' } });
    submit(c, 'any', { resources: { gpus: 1, vramGb: 10 } });
    const placed = plan(c, T0).assignments;
    expect(placed.map((a) => [a.id, a.workerId, a.gpus])).toEqual([
      ['wants-a100', 'b-a100', [0, 1]],
      ['any', 'a-l4', [0]],
    ]);
  });

  it('places a job that runs in a container on a worker of the Docker runtime, and one on the host elsewhere', () => {
    const c = emptyCluster();
    worker(c, 'host', [24], 2);
    worker(c, 'docker', [24], 2, 'sim', 'docker');
    submit(c, 'boxed-gpu', { image: 'python', resources: { gpus: 1, vramGb: 4 } });
    submit(c, 'boxed-cpu', { image: 'python', resources: { gpus: 0 } });
    submit(c, 'bare-gpu', { resources: { gpus: 1, vramGb: 4 } });
    submit(c, 'boxed-too-many', { image: 'python', resources: { gpus: 2 } });
    expect(commit(c).map((a) => [a.id, a.workerId])).toEqual([
      ['boxed-gpu', 'docker'],
      ['boxed-cpu', 'docker'],
      ['bare-gpu', 'host'],
    ]);
  });

  it('places a job with a memory limit only on a worker that holds it; Docker workers of before did', () => {
    const c = emptyCluster();
    worker(c, 'loose', [], 2, 'sim', 'process', false);
    worker(c, 'old', [], 2, 'sim', 'process');
    submit(c, 'limited', { resources: { gpus: 0, memoryGb: 1 } });
    submit(c, 'boxed', { image: 'python', resources: { gpus: 0, memoryGb: 1 } });
    submit(c, 'free', { resources: { gpus: 0 } });
    expect(commit(c).map((a) => [a.id, a.workerId])).toEqual([['free', 'loose']]);
    worker(c, 'held', [], 2, 'sim', 'process', true);
    worker(c, 'docker', [], 2, 'sim', 'docker');
    expect(commit(c).map((a) => [a.id, a.workerId])).toEqual([
      ['limited', 'held'],
      ['boxed', 'docker'],
    ]);
  });

  it('does not let a job that names a model it cannot have hold back one that asks the same of any GPU', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24], 0, 'NVIDIA L4');
    submit(c, 'h100', { resources: { gpus: 1, vramGb: 8, gpuModel: 'H100' } });
    submit(c, 'plain', { resources: { gpus: 1, vramGb: 8 } });
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['plain']);
  });

  it('places a job only where its VRAM plus the headroom fits', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'big', { resources: { gpus: 1, vramGb: 23.5 } });
    submit(c, 'ok', { resources: { gpus: 1, vramGb: 22 } });
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['ok']);
  });

  it('skips jobs that ask what found no place, and still places smaller ones behind them', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    submit(c, 'first', { resources: { gpus: 1, vramGb: 12 } });
    for (const id of ['big1', 'big2', 'big3'])
      submit(c, id, { resources: { gpus: 2, vramGb: 20 } });
    submit(c, 'small', { resources: { gpus: 1, vramGb: 8 } });
    submit(c, 'cpu', { resources: { gpus: 0 } });
    submit(c, 'last', { resources: { gpus: 1, vramGb: 12 } });
    expect(commit(c).map((a) => a.id)).toEqual(['first', 'small', 'last']);
  });

  it('shares a GPU between jobs only while both fit in its memory', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    for (const id of ['a', 'b', 'c']) submit(c, id, { resources: { gpus: 1, vramGb: 10 } });
    const placed = commit(c);
    expect(placed.map((a) => [a.id, a.gpus])).toEqual([
      ['a', [0]],
      ['b', [0]],
    ]);
    expect(c.workers.get('w1')!.gpus[0]!.reservedBytes).toBe(20 * GiB);
    expect(plan(c, T0).assignments).toEqual([]);
  });

  it('gives a job without declared VRAM a GPU to itself', () => {
    const c = emptyCluster();
    worker(c, 'w1', [80, 80]);
    submit(c, 'small', { resources: { gpus: 1, vramGb: 4 } });
    submit(c, 'whole', { resources: { gpus: 1 } });
    submit(c, 'whole2', { resources: { gpus: 1 } });
    const placed = commit(c);
    expect(placed.map((a) => [a.id, a.gpus])).toEqual([
      ['small', [0]],
      ['whole', [1]],
    ]);
  });

  it('orders by priority, then by age', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'old', { resources: { gpus: 1 } });
    submit(c, 'urgent', { resources: { gpus: 1 }, priority: 10 });
    submit(c, 'new', { resources: { gpus: 1 } });
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['urgent']);
    cancel(c, 'urgent');
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['old']);
  });

  it('ages priority by the wait: a low-priority job overtakes newer ones of a higher priority in time', () => {
    const HOUR = 3_600_000;
    const at = (hours: number) => new Date(T0.getTime() + hours * HOUR);
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'patient', { resources: { gpus: 1 }, priority: -100 });
    // A stream of new jobs of the default priority keeps coming.
    submit(c, 'fresh-9h', { resources: { gpus: 1 } }, at(9));
    expect(plan(c, at(9)).assignments.map((a) => a.id)).toEqual(['fresh-9h']);
    cancel(c, 'fresh-9h');
    // 10 points an hour by default: after 10 hours it ties with a job just queued, and wins as
    // the one queued longer; after 11 it leads outright.
    submit(c, 'fresh-10h', { resources: { gpus: 1 } }, at(10));
    expect(plan(c, at(10)).assignments.map((a) => a.id)).toEqual(['patient']);
    submit(c, 'urgent-11h', { resources: { gpus: 1 }, priority: 5 }, at(11));
    expect(plan(c, at(11)).assignments.map((a) => a.id)).toEqual(['patient']);
    // Without aging, priority alone decides.
    const strict = { ...DEFAULT_POLICY, agingPerHour: 0 };
    expect(plan(c, at(11), strict).assignments.map((a) => a.id)).toEqual(['urgent-11h']);
    expect(effectivePriority(-100, T0.getTime(), at(11), DEFAULT_POLICY)).toBe(10);
  });

  it('places by a priority changed while the job waits, keeping its place in the queue', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'first', { resources: { gpus: 1 } });
    submit(c, 'second', { resources: { gpus: 1 } });
    const raised = { type: 'JobPriorityChanged', data: { priority: 3, previous: 0 } };
    evolveCluster(c, stored('job', 'second', raised));
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['second']);
    const lowered = { type: 'JobPriorityChanged', data: { priority: 0, previous: 3 } };
    evolveCluster(c, stored('job', 'second', lowered));
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['first']);
    expect(c.jobs.get('second')!.queuedAtMs).toBe(T0.getTime());
  });

  it('ages a job from when it last became placeable, and keeps that through a snapshot', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'j1', { resources: { gpus: 1 } });
    expect(c.jobs.get('j1')!.queuedAtMs).toBe(T0.getTime());
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect(restored.jobs.get('j1')!.queuedAtMs).toBe(T0.getTime());
  });

  it('takes a long queue in priority-then-age order, a few slots at a time', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24, 24]);
    const queue: { id: string; priority: number; order: number }[] = [];
    for (let i = 0; i < 300; i++) {
      const priority = (i * 7919) % 5;
      submit(c, `j${i}`, { resources: { gpus: 1 }, priority });
      queue.push({ id: `j${i}`, priority, order: i });
    }
    const expected = queue
      .sort((a, b) => b.priority - a.priority || a.order - b.order)
      .map((j) => j.id);
    const taken: string[] = [];
    while (taken.length < queue.length) {
      const assignments = commit(c);
      const placed = assignments.map((a) => a.id);
      expect(placed).toHaveLength(Math.min(3, queue.length - taken.length));
      taken.push(...placed);
      finish(c, assignments);
    }
    expect(taken).toEqual(expected);
  });

  it('never makes more attempts than there are free slots', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    worker(c, 'w2', [24, 24]);
    for (let i = 0; i < 10; i++) submit(c, `j${i}`, { resources: { gpus: 1 } });
    expect(commit(c)).toHaveLength(4);
    expect(plan(c, T0).assignments).toEqual([]);
  });

  it('places multi-GPU jobs on one worker with enough GPUs', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    worker(c, 'w2', [24, 24]);
    submit(c, 'pair', { resources: { gpus: 2 } });
    expect(plan(c, T0).assignments).toEqual([
      { kind: 'job', id: 'pair', workerId: 'w2', gpus: [0, 1], vramBytes: 24 * GiB, cpus: 0 },
    ]);
  });

  it('runs CPU jobs in CPU slots only', () => {
    const c = emptyCluster();
    worker(c, 'w1', [], 2);
    for (const id of ['a', 'b', 'c']) submit(c, id, { resources: { gpus: 0 } });
    submit(c, 'gpu', { resources: { gpus: 1 } });
    expect(commit(c).map((a) => a.id)).toEqual(['a', 'b']);
  });

  it('frees the slot when the attempt ends, and skips workers that left', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'a', { resources: { gpus: 1 } });
    submit(c, 'b', { resources: { gpus: 1 } });
    const [a] = commit(c);
    evolveCluster(
      c,
      stored('job', 'a', { type: 'JobSucceeded', data: { attemptId: `att-a-0`, durationMs: 1 } }),
    );
    expect(a!.id).toBe('a');
    expect(c.jobs.has('a')).toBe(false);
    expect(plan(c, T0).assignments.map((x) => x.id)).toEqual(['b']);
    evolveCluster(c, stored('worker', 'w1', { type: 'WorkerLeft', data: { reason: 'stopped' } }));
    expect(plan(c, T0).assignments).toEqual([]);
  });

  it('holds a retrying job until its retry time and says when to wake', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'r', { resources: { gpus: 1 } });
    commit(c);
    const retryAt = new Date(T0.getTime() + 5000);
    evolveCluster(
      c,
      stored('job', 'r', {
        type: 'JobAttemptFailed',
        data: {
          attemptId: 'att-r-0',
          exitCode: null,
          durationMs: 1,
          failure: { kind: 'system', reason: 'launchError', message: 'x', retryable: true },
          retry: { retryAt: retryAt.toISOString(), backoffMs: 5000 },
        },
      }),
    );
    expect(plan(c, T0)).toEqual({
      assignments: [],
      reservation: null,
      preemptions: [],
      wakeAt: retryAt,
    });
    expect(plan(c, retryAt).assignments.map((a) => a.id)).toEqual(['r']);
  });
});

describe('stale attempts', () => {
  it('finds the attempts of lost workers and of workers that came back without them', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    worker(c, 'w2', [24]);
    submit(c, 'a', { resources: { gpus: 1 } });
    submit(c, 'b', { resources: { gpus: 1 } });
    const placed = commit(c);
    expect(placed.map((p) => p.workerId)).toEqual(['w1', 'w2']);
    expect(staleAttempts(c)).toEqual([]);

    evolveCluster(
      c,
      stored('worker', 'w1', { type: 'WorkerLost', data: { lastSeenAt: null, timeoutMs: 1 } }),
    );
    expect(staleAttempts(c)).toEqual([{ jobId: 'a', attemptId: 'att-a-0', workerId: 'w1' }]);

    worker(c, 'w2', [24]);
    expect(staleAttempts(c, 'w2')).toEqual([{ jobId: 'b', attemptId: 'att-b-1', workerId: 'w2' }]);
  });

  it('keeps an attempt that a re-registering worker reports as still running', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24]);
    submit(c, 'a', { resources: { gpus: 1 } });
    commit(c);
    evolveCluster(
      c,
      stored('worker', 'w1', {
        type: 'WorkerRegistered',
        data: {
          name: 'w1',
          hostname: 'h',
          cpuSlots: 0,
          runtime: 'process',
          version: 't',
          runningAttempts: ['att-a-0'],
          gpus: [{ index: 0, name: 'sim', uuid: 'u', vramBytes: 24 * GiB, simulated: true }],
        },
      }),
    );
    expect(staleAttempts(c)).toEqual([]);
    expect(c.workers.get('w1')!.gpus[0]!.attempts).toBe(1);
  });
});

describe('cluster snapshots', () => {
  it('restore to a state that plans exactly like the original', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24], 2);
    for (const id of ['a', 'b', 'c', 'd']) submit(c, id, { resources: { gpus: 1, vramGb: 10 } });
    submit(c, 'cpu', { resources: { gpus: 0 } });
    commit(c);
    submit(c, 'late', { resources: { gpus: 1, vramGb: 10 } });
    const restored = restoreCluster(
      JSON.parse(JSON.stringify(snapshotCluster(c))) as ClusterSnapshot,
    );
    // The placement queue is not state: it is made afresh from the rest.
    expect({ ...restored, queue: null }).toEqual({ ...c, queue: null });
    expect(plan(restored, T0)).toEqual(plan(c, T0));
  });
});
