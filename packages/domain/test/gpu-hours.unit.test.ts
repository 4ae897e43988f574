import { describe, expect, it } from 'vitest';
import {
  advanced,
  describePending,
  emptyCluster,
  evolveCluster,
  explainQueue,
  gpuHoursUsed,
  plan,
  restoreCluster,
  snapshotCluster,
  teamAccount,
  type ClusterState,
} from '../src/index.ts';
import { spec, stored, worker } from './given.ts';

const HOUR = 3_600_000;
const at = (iso: string) => new Date(iso);

describe('GPU time as it accrues', () => {
  it('adds what was held since the last change, and starts a month from what was held into it', () => {
    const start = Date.parse('2026-11-30T23:00:00Z');
    let u = advanced(undefined, 0, start);
    u = advanced(u, 2, start + HOUR / 2);
    expect(u).toEqual({ month: '2026-11', gpuMs: HOUR, atMs: start + HOUR / 2 });
    u = advanced(u, 2, start + 2 * HOUR);
    expect(u).toEqual({ month: '2026-12', gpuMs: 2 * HOUR, atMs: start + 2 * HOUR });
    expect(advanced(u, 2, start)).toEqual(u);
  });
});

describe('GPU-hour quotas in placement', () => {
  const oneGpu = spec({ resources: { gpus: 1, vramGb: 20 } });
  const submit = (c: ClusterState, id: string, owner: string, when: string, team?: string) =>
    evolveCluster(
      c,
      stored(
        'job',
        id,
        { type: 'JobSubmitted', data: { owner, spec: oneGpu, ...(team && { team }) } },
        at(when),
      ),
    );
  const run = (c: ClusterState, id: string, from: string, to: string) => {
    evolveCluster(
      c,
      stored(
        'job',
        id,
        {
          type: 'JobAssigned',
          data: {
            attemptId: `a-${id}`,
            attempt: 1,
            workerId: 'w1',
            gpus: [0],
            vramBytes: 1,
            cpus: 0,
          },
        },
        at(from),
      ),
    );
    evolveCluster(
      c,
      stored(
        'job',
        id,
        { type: 'JobSucceeded', data: { attemptId: `a-${id}`, durationMs: 1 } },
        at(to),
      ),
    );
  };
  const hours = (c: ClusterState, account: string, maxGpuHours: number | null) =>
    account.startsWith('team:')
      ? evolveCluster(
          c,
          stored('team', account.slice(5), { type: 'TeamGpuHoursQuotaSet', data: { maxGpuHours } }),
        )
      : evolveCluster(
          c,
          stored('user', account, { type: 'UserGpuHoursQuotaSet', data: { maxGpuHours } }),
        );

  it('holds back a user’s work once it took their GPU-hours this month, until the next', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    hours(c, 'alice', 2);
    submit(c, 'job_1', 'alice', '2026-12-01T00:00:00Z');
    run(c, 'job_1', '2026-12-01T00:00:00Z', '2026-12-01T02:00:00Z');
    submit(c, 'job_2', 'alice', '2026-12-01T03:00:00Z');
    submit(c, 'job_3', 'bob', '2026-12-01T03:00:00Z');
    const now = at('2026-12-01T04:00:00Z');
    expect(gpuHoursUsed(c, 'alice', now.getTime())).toBe(2);
    expect(plan(c, now).assignments.map((a) => a.id)).toEqual(['job_3']);
    const entry = explainQueue(c, now).entries.find((e) => e.id === 'job_2')!;
    expect(describePending(entry)).toMatchObject({
      reason: 'overQuota',
      message:
        "over alice's quota of 2 GPU-hours a month: their work took 2 this month (UTC); it waits for the next month, or for an admin to raise the quota",
    });
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect(plan(restored, now).assignments.map((a) => a.id)).toEqual(['job_3']);
    expect(
      plan(restored, at('2027-01-01T00:00:01Z'))
        .assignments.map((a) => a.id)
        .sort(),
    ).toEqual(['job_2', 'job_3']);
    hours(c, 'alice', null);
    expect(
      plan(c, now)
        .assignments.map((a) => a.id)
        .sort(),
    ).toEqual(['job_2', 'job_3']);
  });

  it('counts running work as it runs, and a team’s members’ work together', () => {
    const c = emptyCluster();
    worker(c, 'w1', [24, 24]);
    hours(c, teamAccount('vision'), 1);
    submit(c, 'job_a', 'alice', '2026-12-01T00:00:00Z', 'vision');
    evolveCluster(
      c,
      stored(
        'job',
        'job_a',
        {
          type: 'JobAssigned',
          data: { attemptId: 'a1', attempt: 1, workerId: 'w1', gpus: [0], vramBytes: 1, cpus: 0 },
        },
        at('2026-12-01T00:00:00Z'),
      ),
    );
    submit(c, 'job_b', 'bob', '2026-12-01T00:10:00Z', 'vision');
    expect(plan(c, at('2026-12-01T00:30:00Z')).assignments.map((a) => a.id)).toEqual(['job_b']);
    const later = at('2026-12-01T01:00:00Z');
    expect(gpuHoursUsed(c, teamAccount('vision'), later.getTime())).toBe(1);
    expect(plan(c, later).assignments).toEqual([]);
    expect(explainQueue(c, later).teams).toEqual([
      { team: 'vision', gpus: 1, maxGpus: null, gpuHours: 1, maxGpuHours: 1 },
    ]);
  });
});
