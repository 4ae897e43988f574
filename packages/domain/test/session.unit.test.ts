import { describe, expect, it } from 'vitest';
import type { SessionEvent, SessionSpec } from '@trainyard/events';
import {
  decideSession,
  DomainError,
  emptyCluster,
  evolveCluster,
  evolveSession,
  initialSessionState,
  plan,
  sessionDeadline,
  staleRuns,
  type SessionCommand,
  type SessionState,
} from '../src/index.ts';
import { stored, submitted, T0, spec as jobSpec } from './given.ts';

const MIN = 60_000;
const GiB = 1024 ** 3;
const at = (ms: number) => new Date(T0.getTime() + ms).toISOString();

const sessionSpec = (over: Partial<SessionSpec> = {}): SessionSpec => ({
  resources: { gpus: 1, vramGb: 8 },
  timers: {},
  ...over,
});

const requested = (spec = sessionSpec()): SessionEvent => ({
  type: 'SessionRequested',
  data: { owner: 'alice', spec, timers: { connectMin: 10, idleMin: 30, maxMin: 360 } },
});
const assigned = (runId = 'r1', run = 1, workerId = 'w1'): SessionEvent => ({
  type: 'SessionAssigned',
  data: { runId, run, workerId, gpus: [0], vramBytes: 8 * GiB, cpus: 0 },
});
const started = (runId = 'r1'): SessionEvent => ({ type: 'SessionStarted', data: { runId } });

/** Folds events into a session, each `stepMs` after the one before. */
function given(events: SessionEvent[], stepMs = 0): SessionState {
  return events.reduce(
    (s, e, i) => evolveSession(s, e, at(i * stepMs)),
    initialSessionState('ses_1'),
  );
}
const when = (events: SessionEvent[], command: SessionCommand) =>
  decideSession(command, given(events));

function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err.code;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('the session decider', () => {
  it('records the image a session runs in, decided at request', () => {
    const image = { ref: 'r@sha256:' + 'b'.repeat(64), digest: 'sha256:' + 'b'.repeat(64) };
    const timers = { connectMin: 10, idleMin: 30, maxMin: 360 };
    const spec = sessionSpec({ fromJob: 'job_1' });
    const events = decideSession(
      { type: 'RequestSession', owner: 'alice', spec, timers, image },
      initialSessionState('ses_1'),
    );
    expect(events).toEqual([
      { type: 'SessionRequested', data: { owner: 'alice', spec, timers, image } },
    ]);
  });

  it('builds the image of a session that names a base image first, one builder at a time', () => {
    const timers = { connectMin: 10, idleMin: 30, maxMin: 360 };
    const spec = sessionSpec({ image: 'python' });
    const request = decideSession(
      { type: 'RequestSession', owner: 'alice', spec, timers },
      initialSessionState('ses_1'),
    );
    expect(request).toEqual([
      { type: 'SessionRequested', data: { owner: 'alice', spec, timers, build: true } },
    ]);
    expect(given(request).status).toBe('building');
    const start = when(request, { type: 'StartBuild', builderId: 'b1' });
    expect(start).toEqual([{ type: 'SessionBuildStarted', data: { builderId: 'b1' } }]);
    const building = [...request, ...start];
    expect(refusal(() => when(building, { type: 'StartBuild', builderId: 'b2' }))).toBe(
      'INVALID_TRANSITION',
    );
    const image = { ref: 'r@sha256:' + 'c'.repeat(64), digest: 'sha256:' + 'c'.repeat(64) };
    const late = { type: 'CompleteBuild' as const, builderId: 'b2', image, durationMs: 5 };
    expect(refusal(() => when(building, late))).toBe('INVALID_TRANSITION');
    const moved = when(building, { type: 'ReclaimBuild', builderId: 'b2', goneBuilderId: 'b1' });
    const built = when([...building, ...moved], late);
    const state = given([...building, ...moved, ...built]);
    expect(state).toMatchObject({ status: 'queued', image, builderId: null });
    const failure = {
      kind: 'user' as const,
      reason: 'buildFailed',
      message: 'no',
      retryable: false,
    };
    const failed = when(building, { type: 'FailBuild', builderId: 'b1', failure });
    expect(given([...building, ...failed])).toMatchObject({ status: 'failed', failure });
    const stopped = when(building, { type: 'StopSession', reason: 'user' });
    expect(given([...building, ...stopped]).status).toBe('stopped');
    expect(refusal(() => when([...building, ...stopped], { ...late, builderId: 'b1' }))).toBe(
      'INVALID_TRANSITION',
    );
  });

  it('goes requested -> queued -> starting -> running -> stopping -> stopped', () => {
    const events = [requested()];
    expect(given(events).status).toBe('queued');
    events.push(
      ...when(events, {
        type: 'AssignSession',
        runId: 'r1',
        workerId: 'w1',
        gpus: [0],
        vramBytes: 1,
        cpus: 0,
      }),
    );
    expect(given(events).status).toBe('starting');
    expect(events.at(-1)).toMatchObject({ type: 'SessionAssigned', data: { run: 1 } });
    events.push(...when(events, { type: 'StartRun', runId: 'r1' }));
    expect(given(events).status).toBe('running');
    events.push(...when(events, { type: 'StopSession', reason: 'user' }));
    expect(events.at(-1)).toEqual({
      type: 'SessionStopRequested',
      data: { reason: 'user', runId: 'r1', workerId: 'w1' },
    });
    expect(given(events).status).toBe('stopping');
    expect(when(events, { type: 'StopSession', reason: 'user' })).toEqual([]);
    events.push(...when(events, { type: 'EndRun', runId: 'r1', failure: null }));
    const end = given(events);
    expect(end.status).toBe('stopped');
    expect(end.stopReason).toBe('user');
    expect(refusal(() => when(events, { type: 'StopSession', reason: 'user' }))).toBe(
      'SESSION_ENDED',
    );
  });

  it('stops a session that was never placed at once, with no worker to ask', () => {
    expect(when([requested()], { type: 'StopSession', reason: 'user' })).toEqual([
      { type: 'SessionStopRequested', data: { reason: 'user', runId: null, workerId: null } },
      { type: 'SessionStopped', data: { runId: null } },
    ]);
  });

  it('refuses a late start or end from a run it has moved on from', () => {
    const moved = [
      requested(),
      assigned('r1'),
      started('r1'),
      {
        type: 'SessionRequeued',
        data: { runId: 'r1', reason: 'worker w1 was lost' },
      } as SessionEvent,
      assigned('r2', 2, 'w2'),
    ];
    expect(refusal(() => when(moved, { type: 'StartRun', runId: 'r1' }))).toBe('STALE_RUN');
    expect(refusal(() => when(moved, { type: 'EndRun', runId: 'r1', failure: null }))).toBe(
      'STALE_RUN',
    );
    expect(when(moved, { type: 'StartRun', runId: 'r2' })).toEqual([started('r2')]);
    const state = given(moved);
    expect(state.runs.map((r) => [r.id, r.endedAt !== null])).toEqual([
      ['r1', true],
      ['r2', false],
    ]);
  });

  it('places a session whose worker is lost again, and tells why until it runs', () => {
    const events = [requested(), assigned(), started()];
    const lost = when(events, { type: 'LoseRun', runId: 'r1', reason: 'worker w1 was lost' });
    expect(lost).toEqual([
      { type: 'SessionRequeued', data: { runId: 'r1', reason: 'worker w1 was lost' } },
    ]);
    const requeued = given([...events, ...lost]);
    expect(requeued.status).toBe('queued');
    expect(requeued.requeuedBecause).toBe('worker w1 was lost');
    expect(
      given([...events, ...lost, assigned('r2', 2), started('r2')]).requeuedBecause,
    ).toBeNull();
  });

  it('ends a stopping session whose worker is lost, rather than placing it again', () => {
    const events = [
      requested(),
      assigned(),
      started(),
      ...when([requested(), assigned(), started()], { type: 'StopSession', reason: 'user' }),
    ];
    expect(when(events, { type: 'LoseRun', runId: 'r1', reason: 'gone' })).toEqual([
      { type: 'SessionStopped', data: { runId: 'r1' } },
    ]);
  });

  it('fails a session whose run ended unasked', () => {
    const failure = {
      kind: 'system' as const,
      reason: 'launchError',
      message: 'no',
      retryable: false,
    };
    const events = [requested(), assigned()];
    const ended = when(events, { type: 'EndRun', runId: 'r1', failure });
    expect(ended).toEqual([{ type: 'SessionFailed', data: { runId: 'r1', failure } }]);
    expect(given([...events, ...ended])).toMatchObject({ status: 'failed', failure });
  });
});

describe('session timers', () => {
  const running = [requested(), assigned(), started()];
  const login: SessionEvent = {
    type: 'SessionLogin',
    data: { user: 'alice', method: 'password', accepted: true, source: '127.0.0.1' },
  };
  const activity = (active: boolean): SessionEvent => ({
    type: 'SessionActivity',
    data: { runId: 'r1', active },
  });

  it('runs out 10 minutes after starting when no one logs in, and says so', () => {
    const state = given(running);
    expect(sessionDeadline(state)).toEqual({
      reason: 'neverConnected',
      at: new Date(at(10 * MIN)),
    });
    expect(
      decideSession({ type: 'ExpireSession', now: new Date(at(10 * MIN - 1)) }, state),
    ).toEqual([]);
    expect(decideSession({ type: 'ExpireSession', now: new Date(at(10 * MIN)) }, state)).toEqual([
      {
        type: 'SessionStopRequested',
        data: { reason: 'neverConnected', runId: 'r1', workerId: 'w1' },
      },
    ]);
  });

  it('counts idleness from the last channel closing; an open channel holds it off', () => {
    const state = (events: SessionEvent[]) =>
      events.reduce((s, e, i) => evolveSession(s, e, at(i * MIN)), initialSessionState('ses_1'));
    const open = state([...running, login, activity(true)]);
    expect(sessionDeadline(open)?.reason).toBe('maxDuration');
    const idle = state([...running, login, activity(true), activity(false)]);
    // The last channel closed at minute 5: idle 30 minutes later.
    expect(sessionDeadline(idle)).toEqual({ reason: 'idle', at: new Date(at(35 * MIN)) });
  });

  it('stops at the hard cap whatever happens', () => {
    const state = given([...running, login, activity(true)]);
    expect(decideSession({ type: 'ExpireSession', now: new Date(at(360 * MIN)) }, state)).toEqual([
      {
        type: 'SessionStopRequested',
        data: { reason: 'maxDuration', runId: 'r1', workerId: 'w1' },
      },
    ]);
  });

  it('stops a session whose run has not started within the start limit, telling its worker', () => {
    const placed = given([requested(), assigned()], MIN);
    // Placed at minute 1: the default limit is 30 minutes.
    expect(sessionDeadline(placed)).toEqual({ reason: 'startTimeout', at: new Date(at(31 * MIN)) });
    const limits = { startMs: 2 * MIN, stopMs: MIN };
    expect(sessionDeadline(placed, limits)?.at).toEqual(new Date(at(3 * MIN)));
    const early = { type: 'ExpireSession' as const, now: new Date(at(3 * MIN - 1)), limits };
    expect(decideSession(early, placed)).toEqual([]);
    const late = decideSession({ ...early, now: new Date(at(3 * MIN)) }, placed);
    expect(late).toEqual([
      {
        type: 'SessionStopRequested',
        data: { reason: 'startTimeout', runId: 'r1', workerId: 'w1' },
      },
    ]);
    // The worker's late word that the run started changes nothing; its end ends the session.
    const stopping = given([requested(), assigned(), ...late], MIN);
    expect(decideSession({ type: 'StartRun', runId: 'r1' }, stopping)).toEqual([]);
    expect(decideSession({ type: 'EndRun', runId: 'r1', failure: null }, stopping)).toEqual([
      { type: 'SessionStopped', data: { runId: 'r1' } },
    ]);
    // A worker that never answers: the run that never started is taken for gone.
    expect(sessionDeadline(stopping, limits)).toEqual({
      reason: 'stopTimeout',
      at: new Date(at(3 * MIN)),
    });
    expect(decideSession({ ...early, now: new Date(at(3 * MIN)) }, stopping)).toEqual([
      { type: 'SessionStopped', data: { runId: 'r1' } },
    ]);
    // A start that came in time wins: the running session's own timers count from it.
    const running = given([requested(), assigned(), started()], MIN);
    expect(sessionDeadline(running, limits)?.reason).toBe('neverConnected');
    expect(decideSession({ ...early, now: new Date(at(5 * MIN)) }, running)).toEqual([]);
  });

  it('sets no deadline on a stopping session whose run started: its GPUs are its until its worker ends it', () => {
    const stopping = given([
      requested(),
      assigned(),
      started(),
      { type: 'SessionStopRequested', data: { reason: 'user', runId: 'r1', workerId: 'w1' } },
    ]);
    expect(stopping.status).toBe('stopping');
    expect(sessionDeadline(stopping)).toBeNull();
    expect(
      decideSession({ type: 'ExpireSession', now: new Date(at(10_000 * MIN)) }, stopping),
    ).toEqual([]);
  });

  it('counts a channel opened as a connection, should its login go unrecorded', () => {
    const state = given([...running, activity(true)]);
    expect(state.connectedAt).not.toBeNull();
    expect(sessionDeadline(state)?.reason).toBe('maxDuration');
  });

  it('records activity of the current run only, and only when it changes', () => {
    expect(when(running, { type: 'RecordActivity', runId: 'r1', active: true })).toEqual([
      activity(true),
    ]);
    expect(
      when([...running, activity(true)], { type: 'RecordActivity', runId: 'r1', active: true }),
    ).toEqual([]);
    expect(when(running, { type: 'RecordActivity', runId: 'old', active: true })).toEqual([]);
  });
});

describe('sessions in the cluster', () => {
  const worker = (id: string, gpus: number, runtime = 'process', dispatchVersion = 3) =>
    stored('worker', id, {
      type: 'WorkerRegistered',
      data: {
        name: id,
        hostname: 'h',
        cpuSlots: 2,
        runtime,
        version: 't',
        dispatchVersion,
        runningAttempts: [],
        gpus: Array.from({ length: gpus }, (_, index) => ({
          index,
          name: 'GPU',
          uuid: `${id}-${index}`,
          vramBytes: 24 * GiB,
          simulated: true,
        })),
      },
    });

  it('places a session like a job, and its run holds the GPU memory it was given', () => {
    const c = emptyCluster();
    evolveCluster(c, worker('w1', 1));
    evolveCluster(
      c,
      stored('session', 'ses_1', requested(sessionSpec({ resources: { gpus: 1, vramGb: 16 } }))),
    );
    const first = plan(c, T0).assignments;
    expect(first).toEqual([
      { kind: 'session', id: 'ses_1', workerId: 'w1', gpus: [0], vramBytes: 16 * GiB, cpus: 0 },
    ]);
    evolveCluster(
      c,
      stored('session', 'ses_1', {
        ...assigned(),
        data: { ...assigned().data, vramBytes: 16 * GiB },
      }),
    );
    expect(c.workers.get('w1')!.gpus[0]!.reservedBytes).toBe(16 * GiB);
    // A 16 GiB job no longer fits beside it on the 24 GiB GPU.
    evolveCluster(
      c,
      stored('job', 'j1', submitted(jobSpec({ resources: { gpus: 1, vramGb: 16 } }))),
    );
    expect(plan(c, T0).assignments).toEqual([]);
    evolveCluster(c, stored('session', 'ses_1', { type: 'SessionStopped', data: { runId: 'r1' } }));
    expect(c.workers.get('w1')!.gpus[0]!.reservedBytes).toBe(0);
    expect(c.sessions.has('ses_1')).toBe(false);
    expect(plan(c, T0).assignments.map((a) => a.id)).toEqual(['j1']);
  });

  it('gives sessions only to host workers that read dispatch version 3', () => {
    const c = emptyCluster();
    evolveCluster(c, worker('old', 1, 'process', 2));
    evolveCluster(c, worker('docker', 1, 'docker'));
    evolveCluster(c, stored('session', 'ses_1', requested()));
    expect(plan(c, T0).assignments).toEqual([]);
    evolveCluster(c, worker('new', 1));
    expect(plan(c, T0).assignments.map((a) => a.workerId)).toEqual(['new']);
  });

  it('gives a session in a job’s image only to workers of the Docker runtime that read dispatch version 4, and keeps the image', () => {
    const image = {
      ref: 'reg:5000/trainyard/jobs@sha256:' + 'a'.repeat(64),
      digest: 'sha256:' + 'a'.repeat(64),
    };
    const boxed: SessionEvent = {
      type: 'SessionRequested',
      data: {
        owner: 'alice',
        spec: sessionSpec({ fromJob: 'job_1' }),
        timers: { connectMin: 10, idleMin: 30, maxMin: 360 },
        image,
      },
    };
    expect(given([boxed]).image).toEqual(image);
    const c = emptyCluster();
    evolveCluster(c, worker('host', 1));
    evolveCluster(c, stored('session', 'ses_1', boxed));
    expect(plan(c, T0).assignments).toEqual([]);
    evolveCluster(c, worker('docker-v3', 1, 'docker'));
    expect(plan(c, T0).assignments).toEqual([]);
    evolveCluster(c, worker('docker', 1, 'docker', 4));
    expect(plan(c, T0).assignments.map((a) => a.workerId)).toEqual(['docker']);
  });

  it('finds the runs of a lost worker, to place their sessions again', () => {
    const c = emptyCluster();
    evolveCluster(c, worker('w1', 1));
    evolveCluster(c, stored('session', 'ses_1', requested()));
    evolveCluster(c, stored('session', 'ses_1', assigned()));
    expect(staleRuns(c)).toEqual([]);
    evolveCluster(
      c,
      stored('worker', 'w1', { type: 'WorkerLost', data: { lastSeenAt: null, timeoutMs: 1 } }),
    );
    expect(staleRuns(c)).toEqual([{ sessionId: 'ses_1', runId: 'r1', workerId: 'w1' }]);
  });
});
