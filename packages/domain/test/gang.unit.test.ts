import { describe, expect, it } from 'vitest';
import type { JobEvent } from '@trainyard/events';
import {
  decideJob,
  emptyCluster,
  evolveCluster,
  evolveJob,
  explainQueue,
  masterPortFor,
  memberAttemptId,
  memberStatus,
  plan,
  staleAttempts,
  type ClusterState,
  type JobCommand,
  type JobState,
} from '../src/index.ts';
import { describePending } from '../src/queue-words.ts';
import {
  commit,
  given,
  spec,
  stored,
  submit,
  submitted,
  T0,
  worker as anyWorker,
} from './given.ts';

const GB = 1024 ** 3;

/** A worker of the dispatch contract that carries gangs' members. */
const worker = (cluster: ClusterState, id: string, gpuGb: number[], cpuSlots = 0) =>
  anyWorker(cluster, id, gpuGb, cpuSlots, 'sim', 'process', undefined, 5);
const gang = spec({ resources: { gpus: 1, vramGb: 8 }, nodes: 3, maxRetries: 1 });

/** A gang of three assigned to w1 (rank 0), w2 and w3, one GPU each. */
const assignedGang = (attemptId = 'a1', attempt = 1): JobEvent => ({
  type: 'JobAssigned',
  data: {
    attemptId,
    attempt,
    workerId: 'w1',
    gpus: [0],
    vramBytes: 8 * GB,
    cpus: 0,
    members: [
      { workerId: 'w2', gpus: [0], vramBytes: 8 * GB, cpus: 0 },
      { workerId: 'w3', gpus: [1], vramBytes: 8 * GB, cpus: 0 },
    ],
  },
});

const evolve = (s: JobState, e: JobEvent) => evolveJob(s, e, T0.toISOString());

/** Runs a command on the state and folds what it decides, as the log would. */
function step(state: JobState, command: JobCommand): [JobState, JobEvent[]] {
  const events = decideJob(command, state);
  return [events.reduce(evolve, state), events];
}

const exit0 = { kind: 'exited', exitCode: 0 } as const;
const finish = (attemptId: string, exit: { kind: 'exited'; exitCode: number } = exit0) => ({
  type: 'FinishAttempt' as const,
  attemptId,
  exit,
  durationMs: 1000,
  now: T0,
  jitter: 0,
});

describe('gang jobs', () => {
  it('are placed on as many workers at once, or not at all, and hold GPUs on each', () => {
    const cluster = emptyCluster();
    for (const id of ['w1', 'w2', 'w3']) worker(cluster, id, [24]);
    submit(cluster, 'job_small', { resources: { gpus: 1, vramGb: 8 } });
    submit(cluster, 'job_gang', { resources: { gpus: 1 }, nodes: 3 });
    // The small job takes a GPU of w1: two workers are left whole for a gang of three, which
    // takes none of them.
    expect(plan(cluster, T0).assignments.map((a) => a.id)).toEqual(['job_small']);
    const pending = explainQueue(cluster, T0).entries.find((e) => e.id === 'job_gang')!;
    expect(pending.reason).toBe('gangIncomplete');
    expect(describePending(pending).message).toBe(
      'waiting for room on 3 workers at once: it needs 1 GPU (whole) on each, and only 2 online workers have that free now',
    );
    commit(cluster);
    worker(cluster, 'w4', [24, 24]);
    const [placed] = plan(cluster, T0).assignments;
    expect(placed).toMatchObject({ id: 'job_gang', workerId: 'w2', gpus: [0] });
    expect(placed!.members!.map((m) => m.workerId)).toEqual(['w3', 'w4']);
    commit(cluster);
    const held = [...cluster.workers.values()].map((w) => [w.id, w.gpus.map((g) => g.attempts)]);
    expect(held).toEqual([
      ['w1', [1]],
      ['w2', [1]],
      ['w3', [1]],
      ['w4', [1, 0]],
    ]);
    // Its owner holds its three GPUs, and the small job's one.
    expect(cluster.gpusHeld.get('alice')).toBe(4);
    expect(cluster.holding.jobs.get('job_gang#2')).toMatchObject({ workerId: 'w4', gpus: [0] });
    // A lost member's worker names the member for the scheduler to fail.
    evolveCluster(
      cluster,
      stored('worker', 'w3', {
        type: 'WorkerLost',
        data: { lastSeenAt: null, timeoutMs: 1000 },
      }),
    );
    expect(staleAttempts(cluster)).toEqual([
      { jobId: 'job_gang', attemptId: 'att-job_gang-r1', workerId: 'w3' },
    ]);
    // Its end gives back what it held on every worker.
    evolveCluster(
      cluster,
      stored('job', 'job_gang', { type: 'JobCancelled', data: { attemptId: 'att-job_gang' } }),
    );
    expect(cluster.workers.get('w4')!.gpus[0]!.attempts).toBe(0);
    expect(cluster.gpusHeld.get('alice')).toBe(1);
    expect(cluster.holding.jobs.has('job_gang#2')).toBe(false);
  });

  it('gathers workers as they free up, later work of GPUs kept off them, rather than wait for ever', () => {
    const cluster = emptyCluster();
    for (const id of ['w1', 'w2', 'w3']) worker(cluster, id, [24], 4);
    // w1 and w2 run work that ends within an hour; w3 is free.
    submit(cluster, 'job_a', { resources: { gpus: 1 }, priority: 5, timeLimit: 3600 });
    submit(cluster, 'job_b', { resources: { gpus: 1 }, priority: 5, timeLimit: 3600 });
    commit(cluster);
    submit(cluster, 'job_gang', { resources: { gpus: 1 }, nodes: 2, priority: 1 });
    submit(cluster, 'job_small', { resources: { gpus: 1, vramGb: 4 } });
    submit(cluster, 'job_cpu', { resources: { gpus: 0, cpus: 1 } });
    // w3 is held for the gang: the small GPU job behind it may not take it; CPU work may.
    expect(plan(cluster, T0).assignments.map((a) => [a.id, a.workerId])).toEqual([
      ['job_cpu', 'w1'],
    ]);
    evolveCluster(
      cluster,
      stored('job', 'job_a', {
        type: 'JobSucceeded',
        data: { attemptId: 'att-job_a', durationMs: 1 },
      }),
    );
    const [gang, ...rest] = plan(cluster, T0).assignments;
    expect(gang).toMatchObject({ id: 'job_gang', workerId: 'w1', members: [{ workerId: 'w3' }] });
    expect(rest.map((a) => a.id)).toEqual(['job_cpu']);
  });

  it('holds nothing for a gang that too few workers could hold, now or once their work ends', () => {
    const cluster = emptyCluster();
    worker(cluster, 'w1', [24]);
    submit(cluster, 'job_gang', { resources: { gpus: 1 }, nodes: 2, priority: 1 });
    submit(cluster, 'job_small', { resources: { gpus: 1, vramGb: 4 } });
    expect(plan(cluster, T0).assignments.map((a) => a.id)).toEqual(['job_small']);
    // Two workers, one running work without an end: holding the other would only keep it idle.
    const busy = emptyCluster();
    worker(busy, 'w1', [24]);
    worker(busy, 'w2', [24]);
    submit(busy, 'job_a', { resources: { gpus: 1 }, priority: 5 });
    commit(busy);
    submit(busy, 'job_gang', { resources: { gpus: 1 }, nodes: 2, priority: 1 });
    submit(busy, 'job_small', { resources: { gpus: 1, vramGb: 4 } });
    expect(plan(busy, T0).assignments.map((a) => [a.id, a.workerId])).toEqual([
      ['job_small', 'w2'],
    ]);
  });

  it('does not take a member that ended for one lost with its worker', () => {
    const cluster = emptyCluster();
    for (const id of ['w1', 'w2']) worker(cluster, id, [24]);
    submit(cluster, 'job_g', { resources: { gpus: 1 }, nodes: 2 });
    commit(cluster);
    const attemptId = 'att-job_g';
    for (const rank of [0, 1])
      evolveCluster(
        cluster,
        stored('job', 'job_g', { type: 'JobMemberStarted', data: { attemptId, rank } }),
      );
    const ended = { attemptId, rank: 1, exitCode: 0, failure: null, durationMs: 5 };
    evolveCluster(cluster, stored('job', 'job_g', { type: 'JobMemberEnded', data: ended }));
    const lost = { lastSeenAt: null, timeoutMs: 1000 };
    evolveCluster(cluster, stored('worker', 'w2', { type: 'WorkerLost', data: lost }));
    expect(staleAttempts(cluster)).toEqual([]);
    evolveCluster(cluster, stored('worker', 'w1', { type: 'WorkerLost', data: lost }));
    expect(staleAttempts(cluster)).toEqual([{ jobId: 'job_g', attemptId, workerId: 'w1' }]);
  });

  it('gives rank 0 a port by the attempt, past those of live gangs on its worker', () => {
    const port = masterPortFor([], 'w1', 'a2');
    expect(port).toBe(masterPortFor([], 'w1', 'a2'));
    expect(port).toBeGreaterThanOrEqual(29_500);
    expect(port).toBeLessThan(30_500);
    const live = evolve(given([submitted(gang)]), {
      ...assignedGang(),
      data: { ...(assignedGang().data as object), masterPort: port },
    } as JobEvent);
    const next = masterPortFor([{ state: live }], 'w1', 'a2');
    expect(next).not.toBe(port);
    expect(next === port + 1 || next === 29_500).toBe(true);
    // Another worker's gangs do not count.
    expect(masterPortFor([{ state: live }], 'w2', 'a2')).toBe(port);
    // Spread over the range: a thousand attempts draw some 630 of its thousand ports.
    const ports = new Set(Array.from({ length: 1000 }, (_, i) => masterPortFor([], 'w', `a${i}`)));
    expect(ports.size).toBeGreaterThan(550);
  });

  it('refuses at submission, as no worker could hold it, a gang wider than the fleet', () => {
    const cluster = emptyCluster();
    worker(cluster, 'w1', [24, 24]);
    submit(cluster, 'job_gang', { resources: { gpus: 1, vramGb: 8 }, nodes: 2 });
    expect(explainQueue(cluster, T0).entries[0]!.reason).toBe('unsatisfiable');
    // Workers of a version that cannot carry a gang's members do not count.
    anyWorker(cluster, 'old', [24, 24], 0, 'sim', 'process', undefined, 4);
    expect(explainQueue(cluster, T0).entries[0]!.reason).toBe('unsatisfiable');
    worker(cluster, 'new', [24]);
    expect(plan(cluster, T0).assignments[0]).toMatchObject({
      workerId: 'new',
      members: [{ workerId: 'w1' }],
    });
  });

  it('starts once every member has, and succeeds once every member exited 0', () => {
    let state = given([submitted(gang), assignedGang()]);
    let events: JobEvent[];
    [state, events] = step(state, { type: 'StartAttempt', attemptId: memberAttemptId('a1', 2) });
    expect(events).toEqual([{ type: 'JobMemberStarted', data: { attemptId: 'a1', rank: 2 } }]);
    expect(state.status).toBe('assigned');
    // The member's worker is told it runs; another's, not yet.
    expect(memberStatus(state, 'a1-r2')).toBe('running');
    expect(memberStatus(state, 'a1-r1')).toBe('assigned');
    // A start said twice is the start already recorded.
    expect(decideJob({ type: 'StartAttempt', attemptId: 'a1-r2' }, state)).toEqual([]);
    [state] = step(state, { type: 'StartAttempt', attemptId: 'a1' });
    [state, events] = step(state, { type: 'StartAttempt', attemptId: 'a1-r1' });
    expect(events.map((e) => e.type)).toEqual(['JobMemberStarted', 'JobStarted']);
    expect(state.status).toBe('running');
    [state, events] = step(state, finish('a1-r1'));
    expect(events).toEqual([
      {
        type: 'JobMemberEnded',
        data: { attemptId: 'a1', rank: 1, exitCode: 0, failure: null, durationMs: 1000 },
      },
    ]);
    expect(memberStatus(state, 'a1-r1')).toBe('succeeded');
    // An end said twice is the end already recorded: it does not count twice.
    expect(decideJob(finish('a1-r1'), state)).toEqual([]);
    [state, events] = step(state, finish('a1'));
    expect(events.map((e) => e.type)).toEqual(['JobMemberEnded']);
    [state, events] = step(state, finish('a1-r2'));
    expect(events).toEqual([{ type: 'JobSucceeded', data: { attemptId: 'a1', durationMs: 1000 } }]);
    expect(state.status).toBe('succeeded');
  });

  it('ends the attempt once every member that started ended, as the platform or the first failed it', () => {
    let state = given([submitted(gang), assignedGang()]);
    for (const id of ['a1', 'a1-r1', 'a1-r2'])
      [state] = step(state, { type: 'StartAttempt', attemptId: id });
    // Rank 0 fails first, for want of rank 2, whose worker is lost: the attempt holds its GPUs
    // until every member ended, and fails as the platform failed it, retried.
    let events: JobEvent[];
    [state, events] = step(state, finish('a1', { kind: 'exited', exitCode: 1 }));
    expect(events[0]).toMatchObject({
      type: 'JobMemberEnded',
      data: { rank: 0, failure: { reason: 'nonZeroExit' } },
    });
    expect(state.attempts[0]!.brokenAt).not.toBeNull();
    expect(state.status).toBe('running');
    [state, events] = step(state, finish('a1-r1', { kind: 'exited', exitCode: 1 }));
    expect(events.map((e) => e.type)).toEqual(['JobMemberEnded']);
    // Outputs are rank 0's: another member's are not recorded.
    expect(decideJob({ type: 'SyncOutputs', attemptId: 'a1-r2', files: [] }, state)).toEqual([]);
    const lost = {
      type: 'FailAttempt' as const,
      attemptId: 'a1-r2',
      failure: {
        kind: 'system' as const,
        reason: 'workerLost',
        message: 'worker w3 no longer runs it',
        retryable: true,
      },
      now: T0,
      jitter: 0,
    };
    [state, events] = step(state, lost);
    expect(events).toEqual([
      expect.objectContaining({
        type: 'JobAttemptFailed',
        data: expect.objectContaining({
          attemptId: 'a1',
          failure: expect.objectContaining({
            reason: 'workerLost',
            message: 'rank 2 (worker w3): worker w3 no longer runs it',
          }),
        }),
      }),
    ]);
    expect(state.status).toBe('retrying');
    // What the others report of the ended attempt no longer applies.
    expect(() => decideJob(finish('a1'), state)).toThrow(/no longer holds/);
  });

  it('fails as its first member to fail did, and a member that never started does not start', () => {
    let state = given([submitted(gang), assignedGang()]);
    for (const id of ['a1', 'a1-r1'])
      [state] = step(state, { type: 'StartAttempt', attemptId: id });
    [state] = step(state, finish('a1-r1', { kind: 'exited', exitCode: 3 }));
    expect(() => decideJob({ type: 'StartAttempt', attemptId: 'a1-r2' }, state)).toThrow(
      /being stopped: rank 2 does not start/,
    );
    // Rank 0, stopped, is the last that started: the attempt ends as rank 1 failed it.
    const [after] = step(state, finish('a1', { kind: 'exited', exitCode: 143 }));
    expect(after.status).toBe('failed');
    expect(after.failure).toMatchObject({
      reason: 'nonZeroExit',
      message: 'rank 1 (worker w2): the command exited with code 3',
    });
  });

  it('fails at its time limit though its members exit 0 when stopped, or do not answer', () => {
    const limited = spec({ resources: { gpus: 1, vramGb: 8 }, nodes: 3, timeLimit: 60 });
    let state = given([submitted(limited), assignedGang()]);
    for (const id of ['a1', 'a1-r1', 'a1-r2'])
      [state] = step(state, { type: 'StartAttempt', attemptId: id });
    const past = new Date(T0.getTime() + 61_000);
    [state] = step(state, { type: 'EnforceTimeLimit', now: past });
    const stopped = (attemptId: string) => ({ ...finish(attemptId), stopped: true });
    let ended = state;
    for (const id of ['a1', 'a1-r1', 'a1-r2']) [ended] = step(ended, stopped(id));
    expect(ended.failure).toMatchObject({ reason: 'timeLimit' });
    // None answers its stop: given up on after the acceptance time, it fails all the same.
    const abandon = {
      type: 'AbandonGang' as const,
      attemptId: 'a1',
      now: new Date(T0.getTime() + 10 * 60_000),
      acceptMs: 60_000,
      jitter: 0,
    };
    const [gone] = step(state, abandon);
    expect(gone.status).toBe('failed');
    expect(gone.failure).toMatchObject({ reason: 'timeLimit' });
    // A member its worker stopped past the limit, exit 0 or not, stops the others too.
    let self = given([submitted(limited), assignedGang()]);
    for (const id of ['a1', 'a1-r1', 'a1-r2'])
      [self] = step(self, { type: 'StartAttempt', attemptId: id });
    [self] = step(self, { ...finish('a1-r1'), durationMs: 120_000, timeLimited: true });
    expect(self.attempts[0]!.brokenAt).not.toBeNull();
    // Preempting a gang is refused, whatever its spec says: it is never preemptible.
    const preemptible = given([submitted({ ...limited, preemptible: true }), assignedGang()]);
    expect(() =>
      decideJob({ type: 'PreemptJob', attemptId: 'a1', by: 'job_x' }, preemptible),
    ).toThrow(/not preemptible/);
  });

  it('is cancelled once every member that started ended, or at once when none had', () => {
    let state = given([submitted(gang), assignedGang()]);
    [state] = step(state, { type: 'StartAttempt', attemptId: 'a1' });
    [state] = step(state, { type: 'CancelJob' });
    expect(() => decideJob({ type: 'StartAttempt', attemptId: 'a1-r1' }, state)).toThrow(
      /being stopped/,
    );
    let events: JobEvent[];
    [state, events] = step(state, finish('a1', { kind: 'exited', exitCode: 143 }));
    expect(events.map((e) => e.type)).toEqual(['JobCancelled']);
    let none = given([submitted(gang), assignedGang()]);
    [none] = step(none, { type: 'CancelJob' });
    [none, events] = step(none, { type: 'StartAttempt', attemptId: 'a1-r2' });
    expect(events.map((e) => e.type)).toEqual(['JobCancelled']);
  });

  it('gives up on members that did not start in time, queued again without a retry spent, a few times', () => {
    let state = given([submitted(gang), assignedGang()]);
    const abandon = (attemptId: string, afterMs: number) => ({
      type: 'AbandonGang' as const,
      attemptId,
      now: new Date(T0.getTime() + afterMs),
      acceptMs: 60_000,
      jitter: 0,
    });
    [state] = step(state, { type: 'StartAttempt', attemptId: 'a1' });
    expect(() => decideJob(abandon('a1', 59_000), state)).toThrow(/may still go on/);
    let events: JobEvent[];
    [state, events] = step(state, abandon('a1', 60_000));
    // Rank 0 runs: it is stopped, and the attempt ends when it has.
    expect(events[0]).toMatchObject({
      type: 'JobMemberEnded',
      data: {
        failure: {
          reason: 'gangIncomplete',
          message: 'ranks 1, 2 did not start within 60s of the assignment',
        },
      },
    });
    [state, events] = step(state, finish('a1', { kind: 'exited', exitCode: 143 }));
    expect(events[0]).toMatchObject({
      type: 'JobAttemptFailed',
      data: { failure: { reason: 'gangIncomplete' }, retry: { backoffMs: expect.any(Number) } },
    });
    expect(state.status).toBe('retrying');
    // Once every member started, it is not given up on.
    let full = given([submitted(gang), assignedGang()]);
    for (const id of ['a1', 'a1-r1', 'a1-r2'])
      [full] = step(full, { type: 'StartAttempt', attemptId: id });
    expect(() => decideJob(abandon('a1', 60_000), full)).toThrow(/every member/);
    // Members told to stop that do not answer within the time are given up on too.
    [full] = step(full, finish('a1-r1', { kind: 'exited', exitCode: 2 }));
    const [gone] = step(full, abandon('a1', 60_000));
    expect(gone.failure).toMatchObject({
      message: 'rank 1 (worker w2): the command exited with code 2',
    });
    // The fifth time in all, the job fails rather than queue again; no retry was spent before.
    let s = given([submitted(gang)]);
    for (let n = 1; n <= 5; n++) {
      s = evolve(s, assignedGang(`a${n}`, n));
      [s] = step(s, abandon(`a${n}`, 60_000));
    }
    expect(s.status).toBe('failed');
    expect(s.failure?.message).toMatch(/, 5 times: not queued again$/);
  });

  it('takes no probe, and refuses an assignment short of its members', () => {
    const [sub] = decideJob(
      { type: 'SubmitJob', owner: 'alice', spec: spec({ resources: { gpus: 1 }, nodes: 2 }) },
      given([]),
    );
    expect(sub).toMatchObject({ data: { estimate: false } });
    const state = given([submitted(gang)]);
    expect(() =>
      decideJob(
        { type: 'AssignJob', attemptId: 'a1', workerId: 'w1', gpus: [0], vramBytes: GB, cpus: 0 },
        state,
      ),
    ).toThrow(/runs on 3 workers at once/);
    // Nor may two members share a worker.
    const twice = { workerId: 'w1', gpus: [1], vramBytes: GB, cpus: 0 };
    expect(() =>
      decideJob(
        {
          type: 'AssignJob',
          attemptId: 'a1',
          workerId: 'w1',
          gpus: [0],
          vramBytes: GB,
          cpus: 0,
          members: [twice, { ...twice, workerId: 'w2' }],
        },
        state,
      ),
    ).toThrow(/runs on 3 workers at once/);
  });
});
