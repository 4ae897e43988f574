import { describe, expect, it } from 'vitest';
import type { JobEvent } from '@trainyard/events';
import {
  decideJob,
  emptyCluster,
  evolveJob,
  initialJobState,
  liveOnWorker,
  plan,
  SERVICE_STABLE_MS,
  servicePortsFor,
  type JobCommand,
  type JobState,
} from '../src/index.ts';
import { commit, spec, submit, T0, worker } from './given.ts';

const service = spec({
  kind: 'service',
  health: { http: '/health', intervalS: 15, timeoutS: 5, failures: 3, graceS: 300 },
  maxRetries: 2,
});

/** Folds events, each at its own time: `[event, minutes after T0]`. */
function at(events: [JobEvent, number][]): JobState {
  return events.reduce(
    (s, [e, min]) => evolveJob(s, e, new Date(T0.getTime() + min * 60_000).toISOString()),
    initialJobState('job_s'),
  );
}

const submitted: JobEvent = { type: 'JobSubmitted', data: { owner: 'alice', spec: service } };
const assigned = (n: number, ports = [30_600]): JobEvent => ({
  type: 'JobAssigned',
  data: {
    attemptId: `a${n}`,
    attempt: n,
    workerId: 'w1',
    gpus: [0],
    vramBytes: 8 * 1024 ** 3,
    cpus: 0,
    ports,
  },
});
const started = (n: number): JobEvent => ({ type: 'JobStarted', data: { attemptId: `a${n}` } });
const failedQuickly = (n: number): JobEvent => ({
  type: 'JobAttemptFailed',
  data: {
    attemptId: `a${n}`,
    exitCode: 1,
    failure: { kind: 'user', reason: 'nonZeroExit', retryable: false, message: 'exit 1' },
    durationMs: 1000,
    retry: { retryAt: T0.toISOString(), backoffMs: 1 },
  },
});
/** Two attempts that ended a minute after they started, and a third running since minute 4. */
const twoQuickEnds: [JobEvent, number][] = [
  [submitted, 0],
  [assigned(1), 0],
  [started(1), 0],
  [failedQuickly(1), 1],
  [assigned(2), 2],
  [started(2), 2],
  [failedQuickly(2), 3],
  [assigned(3), 4],
  [started(3), 4],
];
const finish = (
  n: number,
  exit: { kind: 'exited'; exitCode: number },
  durationMs = 1000,
  over: Partial<JobCommand> = {},
): JobCommand =>
  ({
    type: 'FinishAttempt',
    attemptId: `a${n}`,
    exit,
    durationMs,
    now: T0,
    jitter: 0,
    ...over,
  }) as JobCommand;

describe('services', () => {
  it('start again when their command exits 0: a service runs until it is stopped', () => {
    const state = at([
      [submitted, 0],
      [assigned(1), 0],
      [started(1), 0],
    ]);
    const [event] = decideJob(finish(1, { kind: 'exited', exitCode: 0 }), state);
    expect(event).toMatchObject({
      type: 'JobAttemptFailed',
      data: { failure: { reason: 'serviceExited', kind: 'user' }, exitCode: 0 },
    });
    expect((event as { data: { retry: unknown } }).data.retry).not.toBeNull();
    const after = evolveJob(state, event!, T0.toISOString());
    expect(after.status).toBe('retrying');
  });

  it('start again after a crash, or when their health check failed', () => {
    const state = at([
      [submitted, 0],
      [assigned(1), 0],
      [started(1), 0],
    ]);
    const crash = decideJob(finish(1, { kind: 'exited', exitCode: 3 }), state)[0]!;
    expect(crash).toMatchObject({ data: { failure: { reason: 'nonZeroExit' } } });
    expect((crash as { data: { retry: unknown } }).data.retry).not.toBeNull();
    const sick = decideJob(
      finish(1, { kind: 'exited', exitCode: 143 }, 1000, {
        unhealthy: 'GET /health: HTTP 503',
      } as Partial<JobCommand>),
      state,
    )[0]!;
    expect(sick).toMatchObject({
      data: { failure: { reason: 'unhealthy', message: 'GET /health: HTTP 503' } },
    });
    expect((sick as { data: { retry: unknown } }).data.retry).not.toBeNull();
  });

  it('fail once they ended soon after starting more than maxRetries times in a row', () => {
    const state = at([...twoQuickEnds]);
    const [event] = decideJob(finish(3, { kind: 'exited', exitCode: 1 }), state);
    expect(event).toMatchObject({ type: 'JobAttemptFailed', data: { retry: null } });
    expect((event as { data: { failure: { message: string } } }).data.failure.message).toMatch(
      /ended 3 times in a row before it had run 10 minutes .*: not started again/,
    );
  });

  it('start again after a long run even with no retries, and count a server never healthy, or a lost worker’s attempt, by what it did', () => {
    const once = spec({ ...service, maxRetries: 0 });
    const sub: JobEvent = { type: 'JobSubmitted', data: { owner: 'alice', spec: once } };
    const running = at([
      [sub, 0],
      [assigned(1), 0],
      [started(1), 0],
    ]);
    const quick = decideJob(finish(1, { kind: 'exited', exitCode: 1 }), running)[0];
    expect(quick).toMatchObject({ data: { retry: null } });
    const ranLong = decideJob(
      finish(1, { kind: 'exited', exitCode: 1 }, SERVICE_STABLE_MS + 1),
      running,
    )[0];
    expect((ranLong as { data: { retry: unknown } }).data.retry).not.toBeNull();
    const neverHealthy = decideJob(
      finish(1, { kind: 'exited', exitCode: 143 }, 5 * SERVICE_STABLE_MS, {
        unhealthy: 'its health check (GET /health on port 30501) failed 3 times in a row: HTTP 503',
        neverHealthy: true,
      } as Partial<JobCommand>),
      running,
    )[0];
    expect(neverHealthy).toMatchObject({
      data: { failure: { reason: 'neverHealthy' }, retry: null },
    });
    const lost = decideJob(
      {
        type: 'FailAttempt',
        attemptId: 'a1',
        failure: { kind: 'system', reason: 'workerLost', retryable: true, message: 'lost' },
        now: new Date(T0.getTime() + 2 * 3_600_000),
        jitter: 0,
      },
      running,
    )[0];
    expect(lost).toMatchObject({ data: { durationMs: 2 * 3_600_000 } });
    expect((lost as { data: { retry: unknown } }).data.retry).not.toBeNull();
  });

  it('count a long run that was preempted as a fresh start too', () => {
    const preempted: JobEvent = {
      type: 'JobAttemptFailed',
      data: {
        attemptId: 'a3',
        exitCode: 143,
        failure: { kind: 'system', reason: 'preempted', retryable: true, message: 'stopped' },
        durationMs: 1,
        retry: { retryAt: T0.toISOString(), backoffMs: 0 },
      },
    };
    const state = at([...twoQuickEnds, [preempted, 300], [assigned(4), 301], [started(4), 301]]);
    const [event] = decideJob(finish(4, { kind: 'exited', exitCode: 1 }), state);
    expect((event as { data: { retry: unknown } }).data.retry).not.toBeNull();
  });

  it('count an attempt that ran long as a fresh start: the streak of quick ends begins again', () => {
    const longRun = SERVICE_STABLE_MS / 60_000 + 5;
    const state = at([
      [submitted, 0],
      [assigned(1), 0],
      [started(1), 0],
      [failedQuickly(1), 1],
      [assigned(2), 2],
      [started(2), 2],
      [failedQuickly(2), 2 + longRun],
      [assigned(3), 40],
      [started(3), 40],
    ]);
    const [event] = decideJob(finish(3, { kind: 'exited', exitCode: 1 }), state);
    expect((event as { data: { retry: unknown } }).data.retry).not.toBeNull();
    const ranLong = decideJob(
      finish(3, { kind: 'exited', exitCode: 1 }, SERVICE_STABLE_MS),
      at(twoQuickEnds),
    )[0];
    expect((ranLong as { data: { retry: unknown } }).data.retry).not.toBeNull();
  });

  it('do not start again after a failure no start could mend, nor after a stop', () => {
    const state = at([
      [submitted, 0],
      [assigned(1), 0],
    ]);
    const setup = decideJob(
      {
        type: 'FailAttempt',
        attemptId: 'a1',
        failure: {
          kind: 'user',
          reason: 'setupFailed',
          retryable: false,
          message: 'setup exited 1',
        },
        now: T0,
        jitter: 0,
      },
      state,
    )[0];
    expect(setup).toMatchObject({ type: 'JobAttemptFailed', data: { retry: null } });
    const running = at([
      [submitted, 0],
      [assigned(1), 0],
      [started(1), 0],
    ]);
    const [stop] = decideJob({ type: 'CancelJob' } as JobCommand, running);
    const stopping = evolveJob(running, stop!, T0.toISOString());
    expect(
      decideJob(
        finish(1, { kind: 'exited', exitCode: 143 }, 1000, {
          stopped: true,
        } as Partial<JobCommand>),
        stopping,
      ),
    ).toEqual([{ type: 'JobCancelled', data: { attemptId: 'a1' } }]);
  });

  it('are given their ports at assignment, as many as they ask for, and no other job is', () => {
    const state = at([[submitted, 0]]);
    const assign = {
      type: 'AssignJob',
      attemptId: 'a1',
      workerId: 'w1',
      gpus: [0],
      vramBytes: 1,
      cpus: 0,
    } satisfies JobCommand;
    expect(() => decideJob(assign, state)).toThrow(/is given 1 ports/);
    const [event] = decideJob({ ...assign, ports: [30_700] }, state);
    expect(evolveJob(state, event!, T0.toISOString()).attempts[0]!.ports).toEqual([30_700]);
    const job = at([[{ type: 'JobSubmitted', data: { owner: 'a', spec: spec() } }, 0]]);
    expect(() => decideJob({ ...assign, ports: [30_700] }, job)).toThrow(/is given 0 ports/);
  });

  it('draw ports past those of live services on the same worker and those chosen this round', () => {
    const live = at([
      [submitted, 0],
      [assigned(1, [30_800, 30_801]), 0],
      [started(1), 0],
    ]);
    const first = servicePortsFor([], 'w1', 'b1', 3);
    expect(new Set(first).size).toBe(3);
    for (const p of first) expect(p).toBeGreaterThanOrEqual(30_500);
    const taken = servicePortsFor([{ state: live }], 'w1', 'b1', 997, [30_802]);
    expect(new Set(taken).size).toBe(997);
    expect(taken).not.toContain(30_800);
    expect(taken).not.toContain(30_801);
    expect(taken).not.toContain(30_802);
    expect(servicePortsFor([{ state: live }], 'w2', 'b1', 1000)).toContain(30_800);
    // With too few free, taken ones are given too, never one twice.
    expect(new Set(servicePortsFor([{ state: live }], 'w1', 'b1', 1000, [30_802])).size).toBe(1000);
  });

  it('are not probed, and go only to workers that watch their health (dispatch 6)', () => {
    const noVram = spec({ kind: 'service', resources: { gpus: 1 } });
    const [event] = decideJob(
      { type: 'SubmitJob', owner: 'alice', spec: noVram } as JobCommand,
      initialJobState('job_x'),
    );
    expect(event).toMatchObject({ data: { estimate: false } });
    const old = emptyCluster();
    worker(old, 'w5', [16], 0, 'sim', 'process', undefined, 5);
    submit(old, 'job_s', { kind: 'service', resources: { gpus: 1, vramGb: 8 } });
    expect(plan(old, T0).assignments).toHaveLength(0);
    const current = emptyCluster();
    worker(current, 'w6', [16], 0, 'sim', 'process', undefined, 6);
    submit(current, 'job_s', { kind: 'service', resources: { gpus: 1, vramGb: 8 } });
    expect(plan(current, T0).assignments).toMatchObject([{ id: 'job_s', workerId: 'w6' }]);
    // Once assigned there, it is among what may hold ports on that worker.
    expect(liveOnWorker(current, 'w6')).toEqual([]);
    commit(current);
    expect(liveOnWorker(current, 'w6').map((j) => j.state.id)).toEqual(['job_s']);
    expect(liveOnWorker(current, 'w5')).toEqual([]);
  });
});
