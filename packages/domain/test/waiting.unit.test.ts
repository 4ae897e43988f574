import { describe, expect, it } from 'vitest';
import type { JobSpec, SessionEvent } from '@trainyard/events';
import {
  awaitsPlacement,
  DEFAULT_POLICY,
  drain,
  effectivePriority,
  emptyCluster,
  evolveCluster,
  restoreCluster,
  sessionAwaitsPlacement,
  snapshotCluster,
  waitingInOrder,
  waitingQueue,
  type ClusterState,
  type PlacementPolicy,
} from '../src/index.ts';
import { spec, stored, T0 } from './given.ts';

const MIN = 60_000;
const HOUR = 60 * MIN;

/** A small deterministic generator, so that a failing history can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1_664_525 + 1_013_904_223) >>> 0;
    return s / 2 ** 32;
  };
}

/**
 * What may be placed at `now`, sorted afresh from everything the cluster tracks: the order the
 * kept queue must give.
 */
function sortedAfresh(c: ClusterState, now: Date, policy: PlacementPolicy): string[] {
  const waiting: { id: string; priority: number; seq: number }[] = [];
  for (const job of c.jobs.values()) {
    const { state } = job;
    if (!awaitsPlacement(state) || !state.spec) continue;
    if (state.status === 'retrying' && !(state.retryAt && Date.parse(state.retryAt) <= +now))
      continue;
    const priority = effectivePriority(state.spec.priority, job.queuedAtMs, now, policy);
    waiting.push({ id: state.id, priority, seq: job.queuedSeq });
  }
  for (const s of c.sessions.values()) {
    if (!sessionAwaitsPlacement(s.state)) continue;
    const priority = effectivePriority(0, s.queuedAtMs, now, policy);
    waiting.push({ id: s.state.id, priority, seq: s.queuedSeq });
  }
  return waiting.sort((a, b) => b.priority - a.priority || a.seq - b.seq).map((w) => w.id);
}

const inQueue = (c: ClusterState, now: Date, policy = DEFAULT_POLICY) =>
  waitingInOrder(c, now, policy).ready.map((candidate) => candidate.id);

const SHAPES: JobSpec['resources'][] = [
  { gpus: 1 },
  { gpus: 1, vramGb: 8 },
  { gpus: 2, vramGb: 20 },
  { gpus: 0, cpus: 2 },
];

const requested = (): SessionEvent => ({
  type: 'SessionRequested',
  data: {
    owner: 'bob',
    spec: { resources: { gpus: 1, vramGb: 8 }, timers: {} },
    timers: { connectMin: 10, idleMin: 30, maxMin: 360 },
  },
});

/**
 * A random history of a queue: jobs of mixed shapes, priorities and time limits submitted
 * over two days (some stamped by a clock ahead of the scheduler's), sessions requested and
 * placed, and jobs changed while they wait: held and released, their priority changed,
 * cancelled, placed and failed into a retry's backoff.
 */
function history(c: ClusterState, r: () => number, steps: number, nowMs: number): void {
  const ids: string[] = [];
  const sessions = [...c.sessions.keys()];
  for (let i = 0; i < steps; i++) {
    const x = r();
    // Over two days, many in the last half hour; one in ten stamped by a clock ahead of the
    // scheduler's, by up to 20 minutes.
    const y = r();
    const spanMs = y < 0.1 ? -20 * MIN : y < 0.5 ? 30 * MIN : 48 * HOUR;
    const atMs = nowMs - Math.floor(r() * spanMs);
    const at = new Date(atMs);
    const id = ids.length > 0 ? ids[Math.floor(r() * ids.length)]! : null;
    if (x < 0.5 || !id) {
      const jobId = `j${i}`;
      ids.push(jobId);
      const s = spec({
        resources: SHAPES[Math.floor(r() * SHAPES.length)]!,
        priority: Math.floor(r() * 7) - 3,
        ...(r() < 0.5 && { timeLimit: 3600 }),
      });
      const data = { owner: 'alice', spec: s };
      evolveCluster(c, stored('job', jobId, { type: 'JobSubmitted', data }, at));
    } else if (x < 0.55) {
      sessions.push(`s${i}`);
      evolveCluster(c, stored('session', `s${i}`, requested(), at));
    } else if (x < 0.58) {
      const session = sessions[Math.floor(r() * sessions.length)];
      if (c.sessions.get(session ?? '')?.state.status !== 'queued') continue;
      const data = { runId: `r${i}`, run: 1, workerId: 'w1', gpus: [0], vramBytes: 1, cpus: 0 };
      evolveCluster(c, stored('session', session!, { type: 'SessionAssigned', data }, at));
    } else if (x < 0.65) {
      const data = { by: 'owner', reason: '' };
      evolveCluster(c, stored('job', id, { type: 'JobHeld', data }, at));
    } else if (x < 0.72) {
      evolveCluster(c, stored('job', id, { type: 'JobReleased', data: {} }, at));
    } else if (x < 0.8) {
      const priority = Math.floor(r() * 7) - 3;
      const data = { priority, previous: 0 };
      evolveCluster(c, stored('job', id, { type: 'JobPriorityChanged', data }, at));
    } else if (x < 0.85) {
      evolveCluster(c, stored('job', id, { type: 'JobCancelled', data: {} }, at));
    } else if (c.jobs.get(id)?.state.status === 'queued') {
      const attemptId = `a${i}`;
      const assignment = { attemptId, attempt: 1, workerId: 'w1', gpus: [], vramBytes: 0, cpus: 1 };
      evolveCluster(c, stored('job', id, { type: 'JobAssigned', data: assignment }, at));
      if (r() < 0.5) continue;
      const retryAt = new Date(nowMs + Math.floor((r() - 0.5) * 20 * MIN)).toISOString();
      const failure = { kind: 'system', reason: 'launchError', message: 'x', retryable: true };
      const data = {
        attemptId,
        exitCode: null,
        durationMs: 1,
        failure,
        retry: { retryAt, backoffMs: 1 },
      };
      evolveCluster(c, stored('job', id, { type: 'JobAttemptFailed', data }, at));
    }
  }
}

describe('the kept queue', () => {
  it('gives exactly the order of sorting the whole queue afresh, as the queue changes and time passes', () => {
    const r = random(7);
    const c = emptyCluster();
    let nowMs = T0.getTime() + 48 * HOUR;
    let compared = 0;
    for (let round = 0; round < 40; round++) {
      history(c, r, 25, nowMs);
      // Time moves on, by less than a tick or by many; sometimes a round looks back in time.
      nowMs += Math.floor((r() - 0.2) * (r() < 0.2 ? 5 * HOUR : 30 * MIN));
      const now = new Date(nowMs);
      const expected = sortedAfresh(c, now, DEFAULT_POLICY);
      expect(inQueue(c, now)).toEqual(expected);
      compared += expected.length;
    }
    // Another aging rate orders the same waiting work otherwise, and a snapshot's restore makes
    // the queue afresh.
    const now = new Date(nowMs);
    for (const agingPerHour of [0, 2.5, 37]) {
      const policy = { ...DEFAULT_POLICY, agingPerHour };
      expect(inQueue(c, now, policy)).toEqual(sortedAfresh(c, now, policy));
    }
    const restored = restoreCluster(JSON.parse(JSON.stringify(snapshotCluster(c))));
    expect(inQueue(restored, now)).toEqual(sortedAfresh(c, now, DEFAULT_POLICY));
    expect(compared).toBeGreaterThan(1000);
  });

  it('says when the next retry in its backoff comes due', () => {
    const c = emptyCluster();
    history(c, random(3), 400, T0.getTime());
    const now = T0;
    const due = [...c.jobs.values()]
      .filter((j) => j.state.status === 'retrying' && awaitsPlacement(j.state))
      .map((j) => Date.parse(j.state.retryAt!))
      .filter((ms) => ms > now.getTime());
    expect(due.length).toBeGreaterThan(0);
    const { wakeAt } = waitingQueue(c, now, DEFAULT_POLICY);
    expect(wakeAt?.getTime()).toBe(Math.min(...due));
  });

  it('passes over the rest of a family at once when asked, and nothing else', () => {
    const c = emptyCluster();
    const shapes = [{ gpus: 1 }, { gpus: 2 }];
    for (let i = 0; i < 20; i++) {
      const data = { owner: 'alice', spec: spec({ resources: shapes[i % 2]!, priority: i % 3 }) };
      evolveCluster(c, stored('job', `j${i}`, { type: 'JobSubmitted', data }));
    }
    const all = inQueue(c, T0);
    const { queue } = waitingQueue(c, T0, DEFAULT_POLICY);
    const first = queue.next()!;
    queue.skip = (candidate) => candidate.shape === first.shape;
    const rest = [...drain(queue)].map((candidate) => candidate.id);
    const others = all.filter((id) => c.jobs.get(id)!.state.spec!.resources.gpus !== 1);
    expect(first.resources.gpus).toBe(1);
    expect(rest).toEqual(others);
  });
});

describe('aging', () => {
  it('counts the clock’s ticks since a job was queued: work queued between two ties, and the log decides', () => {
    const tick = HOUR / DEFAULT_POLICY.agingPerHour;
    const aged = (queuedMs: number, nowMs: number) =>
      effectivePriority(0, queuedMs, new Date(nowMs), DEFAULT_POLICY);
    const t = T0.getTime();
    // Queued a moment before a tick: a point at that tick.
    expect(aged(t + tick - 1, t + tick)).toBe(1);
    // Queued at a tick: a point a whole tick later, none before.
    expect(aged(t, t + tick - 1)).toBe(0);
    expect(aged(t, t + tick)).toBe(1);
    // Stamped by a clock ahead of the scheduler's: no point taken away.
    expect(aged(t + 5 * tick, t)).toBe(0);
    expect(effectivePriority(3, t, new Date(t + 10 * HOUR), { agingPerHour: 0 })).toBe(3);
  });
});
