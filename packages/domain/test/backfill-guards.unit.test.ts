import { describe, expect, it } from 'vitest';
import {
  emptyCluster,
  evolveCluster,
  explainQueue,
  GiB,
  plan,
  restoreCluster,
  snapshotCluster,
  type ClusterState,
} from '../src/index.ts';
import { run as commit, stored, submit, succeed as finish, T0 } from './given.ts';

const HOUR = 3_600_000;
const at = (ms: number) => new Date(T0.getTime() + ms);

function worker(c: ClusterState, id: string, gpuGb: number[], o: { memoryGb?: number } = {}) {
  const gpus = gpuGb.map((gb, index) => ({
    index,
    name: 'sim',
    uuid: `${id}-${index}`,
    vramBytes: gb * GiB,
    simulated: true,
  }));
  const memory = o.memoryGb === undefined ? {} : { memoryBytes: o.memoryGb * GiB };
  const data = { name: id, hostname: 'h', cpuSlots: 4, runtime: 'process', version: 't' };
  const registered = { ...data, ...memory, limitsMemory: true, gpus };
  evolveCluster(c, stored('worker', id, { type: 'WorkerRegistered', data: registered }));
}

const reasonOf = (c: ClusterState, id: string, when = T0) =>
  explainQueue(c, when).entries.find((e) => e.id === id)?.reason;

describe('backfill never delays the job it reserves for', () => {
  it('through the host memory of the reserved worker, for GPU and CPU work alike', () => {
    for (const cpu of [false, true]) {
      const c = emptyCluster();
      worker(c, 'w1', [24, 24], { memoryGb: 100 });
      submit(c, 'a', { resources: { gpus: 1, vramGb: 20, memoryGb: 50 }, timeLimit: 3600 });
      commit(c);
      submit(c, 'big', { resources: { gpus: 1, vramGb: 20, memoryGb: 60 }, priority: 10 });
      submit(c, 'late', {
        resources: cpu ? { gpus: 0, cpus: 1, memoryGb: 45 } : { gpus: 1, vramGb: 20, memoryGb: 45 },
      });
      expect(plan(c, T0).assignments).toEqual([]);
      expect(reasonOf(c, 'late')).toBe('reserved');
      finish(c, 'a', at(HOUR));
      expect(commit(c, at(HOUR))).toEqual(['big']);
    }
  });

  it('through the quota of its owner, which later work of theirs may not use up', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    worker(c, 'w2', [24]);
    evolveCluster(c, stored('user', 'alice', { type: 'UserQuotaSet', data: { maxGpus: 2 } }));
    submit(c, 'a', { resources: { gpus: 1, vramGb: 20 }, timeLimit: 3600 }, 'bob');
    commit(c);
    submit(c, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 10 });
    submit(c, 'alices', { resources: { gpus: 1, vramGb: 20 } });
    submit(c, 'bobs', { resources: { gpus: 1, vramGb: 20 } }, 'bob');
    expect(plan(c, T0).reservation).toMatchObject({ id: 'pair', workerId: 'w1' });
    expect(commit(c)).toEqual(['bobs']);
    expect(reasonOf(c, 'alices')).toBe('reserved');
    expect(reasonOf(c, 'pair')).toBe('resources');
    finish(c, 'a', at(HOUR));
    expect(commit(c, at(HOUR))).toEqual(['pair']);
  });
});

describe('backfill, as explained and restored', () => {
  it('reserves the same GPUs after a snapshot, where what runs ends at the same time', () => {
    const c = emptyCluster();
    worker(c, 'w1', [48, 48]);
    submit(c, 'a', { resources: { gpus: 1, vramGb: 30 }, timeLimit: 3600 });
    submit(c, 'b', { resources: { gpus: 1, vramGb: 30 }, timeLimit: 3600, priority: 5 });
    expect(commit(c)).toEqual(['b', 'a']);
    submit(c, 'big', { resources: { gpus: 1, vramGb: 30 }, priority: 10 });
    submit(c, 'small', { resources: { gpus: 1, vramGb: 10 } });
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect(plan(restored, T0)).toEqual(plan(c, T0));
  });

  it('says work is kept out by the reservation only while the room is there', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    submit(c, 'a', { resources: { gpus: 1, vramGb: 20 }, timeLimit: 3600 });
    commit(c);
    submit(c, 'pair', { resources: { gpus: 2, vramGb: 20 }, priority: 10 });
    submit(c, 'late_1', { resources: { gpus: 1, vramGb: 20 } });
    submit(c, 'short', { resources: { gpus: 1, vramGb: 20 }, timeLimit: 1800 });
    submit(c, 'late_2', { resources: { gpus: 1, vramGb: 20 } });
    const view = explainQueue(c, T0);
    const reasons = Object.fromEntries(view.entries.map((e) => [e.id, e.reason]));
    expect(reasons).toEqual({
      pair: 'resources',
      late_1: 'reserved',
      short: 'placing',
      late_2: 'resources',
    });
  });
});
