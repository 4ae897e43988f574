import { describe, expect, it } from 'vitest';
import type { JobEvent, JobStatus } from '@trainyard/events';
import {
  awaitsDependencies,
  awaitsPlacement,
  DomainError,
  endsJob,
  evolveJob,
  failure,
  timeLimitDeadline,
} from '../src/index.ts';
import { assigned, given, spec, started, submitted, T0, when } from './given.ts';

const expectRejected = (fn: () => unknown, code: string) => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(DomainError);
    expect((err as DomainError).code).toBe(code);
    return;
  }
  throw new Error(`expected ${code}`);
};

describe('job decider', () => {
  it('submits a job that needs no build straight into the queue', () => {
    const events = when([], { type: 'SubmitJob', owner: 'alice', spec: spec() });
    expect(events).toEqual([
      {
        type: 'JobSubmitted',
        data: { owner: 'alice', spec: spec(), build: false, estimate: false },
      },
    ]);
    expect(given(events).status).toBe('queued');
  });

  it('records the build decision in JobSubmitted, and reads older events by the rule of their time', () => {
    const code = { key: 'k', sizeBytes: 1, sha256: 'a'.repeat(64), format: 'zip' as const };
    const [decided] = when([], { type: 'SubmitJob', owner: 'alice', spec: spec(), code });
    expect(decided).toMatchObject({ type: 'JobSubmitted', data: { build: true } });
    const older = (data: object) => given([{ type: 'JobSubmitted', data } as JobEvent]).status;
    expect(older({ owner: 'alice', spec: spec(), code })).toBe('submitted');
    expect(older({ owner: 'alice', spec: spec() })).toBe('queued');
    expect(older({ owner: 'alice', spec: spec(), code, build: false })).toBe('queued');
  });

  it('sends a job with code and no image to the builder', () => {
    const code = { key: 'k', sizeBytes: 1, sha256: 'a'.repeat(64), format: 'zip' as const };
    const events = when([], { type: 'SubmitJob', owner: 'alice', spec: spec(), code });
    expect(given(events).status).toBe('submitted');
  });

  it('builds a job that names an image, code or none, and records its image once built', () => {
    const submittedWith = (code?: {
      key: string;
      sizeBytes: number;
      sha256: string;
      format: 'zip';
    }) =>
      when([], {
        type: 'SubmitJob',
        owner: 'alice',
        spec: spec({ image: 'python' }),
        ...(code && { code }),
      });
    const code = { key: 'k', sizeBytes: 1, sha256: 'a'.repeat(64), format: 'zip' as const };
    for (const events of [submittedWith(code), submittedWith()]) {
      expect(events[0]).toMatchObject({ type: 'JobSubmitted', data: { build: true } });
      expect(given(events).status).toBe('submitted');
    }
    const image = {
      ref: `r:5000/trainyard/jobs@sha256:${'b'.repeat(64)}`,
      digest: `sha256:${'b'.repeat(64)}`,
    };
    const state = given([
      ...submittedWith(code),
      { type: 'JobBuildStarted', data: { builderId: 'b1' } },
      {
        type: 'JobBuilt',
        data: {
          artifact: { key: 'a', sizeBytes: 1, sha256: 'c'.repeat(64) },
          image,
          durationMs: 5,
        },
      },
    ]);
    expect(state).toMatchObject({ status: 'queued', image });
  });

  it('refuses to submit the same job twice', () => {
    expectRejected(
      () => when([submitted()], { type: 'SubmitJob', owner: 'alice', spec: spec() }),
      'JOB_EXISTS',
    );
  });

  it('assigns a queued job as attempt 1 and numbers later attempts', () => {
    const events = when([submitted()], {
      type: 'AssignJob',
      attemptId: 'a1',
      workerId: 'w1',
      gpus: [0],
      vramBytes: 1,
      cpus: 0,
    });
    expect(events).toEqual([
      {
        type: 'JobAssigned',
        data: { attemptId: 'a1', attempt: 1, workerId: 'w1', gpus: [0], vramBytes: 1, cpus: 0 },
      },
    ]);
  });

  it('refuses to assign a job that is already assigned', () => {
    expectRejected(
      () =>
        when([submitted(), assigned()], {
          type: 'AssignJob',
          attemptId: 'a2',
          workerId: 'w1',
          gpus: [1],
          vramBytes: 1,
          cpus: 0,
        }),
      'INVALID_TRANSITION',
    );
  });

  it('starts only the attempt that holds the job', () => {
    expect(when([submitted(), assigned()], { type: 'StartAttempt', attemptId: 'a1' })).toEqual([
      { type: 'JobStarted', data: { attemptId: 'a1' } },
    ]);
    expectRejected(
      () => when([submitted(), assigned()], { type: 'StartAttempt', attemptId: 'other' }),
      'STALE_ATTEMPT',
    );
  });

  it('takes a start said again as the start already recorded', () => {
    expect(
      when([submitted(), assigned(), started()], { type: 'StartAttempt', attemptId: 'a1' }),
    ).toEqual([]);
  });

  it('records success on exit 0', () => {
    const events = when([submitted(), assigned(), started()], {
      type: 'FinishAttempt',
      attemptId: 'a1',
      exit: { kind: 'exited', exitCode: 0 },
      durationMs: 10,
      now: T0,
      jitter: 0,
    });
    expect(events).toEqual([{ type: 'JobSucceeded', data: { attemptId: 'a1', durationMs: 10 } }]);
    expect(given([submitted(), assigned(), started(), ...events]).status).toBe('succeeded');
  });

  it('fails a job whose command exits 3 as a user failure, without retrying', () => {
    const events = when([submitted(), assigned(), started()], {
      type: 'FinishAttempt',
      attemptId: 'a1',
      exit: { kind: 'exited', exitCode: 3 },
      durationMs: 10,
      now: T0,
      jitter: 0,
    });
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      type: 'JobAttemptFailed',
      data: {
        exitCode: 3,
        failure: { kind: 'user', reason: 'nonZeroExit', retryable: false },
        retry: null,
      },
    });
    const state = given([submitted(), assigned(), started(), ...events]);
    expect(state.status).toBe('failed');
    expect(state.attempts[0]).toMatchObject({ status: 'failed', exitCode: 3 });
  });

  it('retries a platform failure with backoff, then fails after maxRetries', () => {
    const history = [submitted(spec({ maxRetries: 1 })), assigned('a1', 1), started('a1')];
    const first = when(history, {
      type: 'FailAttempt',
      attemptId: 'a1',
      failure: failure('launchError', 'boom'),
      now: T0,
      jitter: 0.5,
    });
    expect(first[0]).toMatchObject({
      type: 'JobAttemptFailed',
      data: { retry: { backoffMs: 3750 } },
    });
    const afterFirst = [...history, ...first];
    expect(given(afterFirst).status).toBe('retrying');
    const second = [...afterFirst, assigned('a2', 2), started('a2')];
    const last = when(second, {
      type: 'FailAttempt',
      attemptId: 'a2',
      failure: failure('launchError', 'boom'),
      now: T0,
      jitter: 0,
    });
    expect(last[0]).toMatchObject({
      type: 'JobAttemptFailed',
      data: { retry: null, failure: { kind: 'system' } },
    });
    expect(given([...second, ...last]).status).toBe('failed');
  });

  it('cancels a queued job at once and a running one through its worker', () => {
    expect(when([submitted()], { type: 'CancelJob' })).toEqual([
      { type: 'JobCancelled', data: {} },
    ]);
    const running = [submitted(), assigned(), started()];
    const requested = when(running, { type: 'CancelJob' });
    expect(requested).toEqual([
      { type: 'JobCancelRequested', data: { attemptId: 'a1', workerId: 'w1' } },
    ]);
    const ended = when([...running, ...requested], {
      type: 'FinishAttempt',
      attemptId: 'a1',
      exit: { kind: 'signalled', signal: 'SIGTERM' },
      durationMs: 5,
      now: T0,
      jitter: 0,
    });
    expect(ended).toEqual([{ type: 'JobCancelled', data: { attemptId: 'a1' } }]);
  });

  it('changes the priority of a job that has not ended, once per change', () => {
    const changed = when([submitted()], { type: 'ChangePriority', priority: -20 });
    expect(changed).toEqual([{ type: 'JobPriorityChanged', data: { priority: -20, previous: 0 } }]);
    const after = given([submitted(), ...changed]);
    expect(after.spec?.priority).toBe(-20);
    expect(after.status).toBe(given([submitted()]).status);
    expect(when([submitted(), ...changed], { type: 'ChangePriority', priority: -20 })).toEqual([]);
    const running = [submitted(), assigned(), started()];
    expect(when(running, { type: 'ChangePriority', priority: 7 })).toEqual([
      { type: 'JobPriorityChanged', data: { priority: 7, previous: 0 } },
    ]);
    const cancelled = [submitted(), { type: 'JobCancelled' as const, data: {} }];
    expectRejected(() => when(cancelled, { type: 'ChangePriority', priority: 1 }), 'JOB_FINISHED');
  });

  describe('dependencies', () => {
    const after = submitted(spec({ dependsOn: ['job_a', 'job_b'] }));

    it('keeps a job out of placement until every job it depends on succeeded', () => {
      const waiting = given([after]);
      expect(waiting).toMatchObject({ status: 'queued', dependenciesMet: false });
      expect(awaitsPlacement(waiting)).toBe(false);
      expect(awaitsDependencies(waiting)).toBe(true);
      expectRejected(
        () =>
          when([after], {
            type: 'AssignJob',
            attemptId: 'a1',
            workerId: 'w1',
            gpus: [0],
            vramBytes: 1,
            cpus: 0,
          }),
        'INVALID_TRANSITION',
      );
      const resolve = (outcomes: Record<string, JobStatus | 'none'>) =>
        when([after], { type: 'ResolveDependencies', outcomes });
      expect(resolve({ job_a: 'succeeded', job_b: 'running' })).toEqual([]);
      const met = resolve({ job_a: 'succeeded', job_b: 'succeeded' });
      expect(met).toEqual([{ type: 'JobDependenciesMet', data: {} }]);
      const free = given([after, ...met]);
      expect(awaitsPlacement(free)).toBe(true);
      expect(awaitsDependencies(free)).toBe(false);
      expect(when([after, ...met], { type: 'ResolveDependencies', outcomes: {} })).toEqual([]);
      expect(given([submitted()]).dependenciesMet).toBe(true);
    });

    it('fails a job, without running it, as soon as one it depends on failed, was cancelled or is unknown', () => {
      for (const status of ['failed', 'cancelled', 'none'] as const) {
        const events = when([after], {
          type: 'ResolveDependencies',
          outcomes: { job_a: 'running', job_b: status },
        });
        expect(events).toMatchObject([
          {
            type: 'JobDependencyFailed',
            data: {
              dependency: 'job_b',
              status,
              failure: { reason: 'dependencyFailed', kind: 'user', retryable: false },
            },
          },
        ]);
        expect(endsJob(events[0]!)).toBe(true);
        const state = given([after, ...events]);
        expect(state.status).toBe('failed');
        expect(state.failure?.message).toContain('job job_b');
        expectRejected(
          () => when([after, ...events], { type: 'ResolveDependencies', outcomes: {} }),
          'JOB_FINISHED',
        );
      }
    });
  });

  describe('time limits', () => {
    const limited = submitted(spec({ timeLimit: 90 }));
    const running = [limited, assigned(), started()];
    const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);
    const reached: JobEvent = {
      type: 'JobTimeLimitReached',
      data: { attemptId: 'a1', workerId: 'w1', timeLimit: 90 },
    };

    it('stops a running attempt once it has run its limit, not before', () => {
      expect(timeLimitDeadline(given(running))).toBe(at(90).getTime());
      expectRejected(
        () => when(running, { type: 'EnforceTimeLimit', now: at(89) }),
        'INVALID_TRANSITION',
      );
      expect(when(running, { type: 'EnforceTimeLimit', now: at(90) })).toEqual([reached]);
      const after = given([...running, reached]);
      expect(after.timeLimitReached).toBe(true);
      expect(timeLimitDeadline(after)).toBeNull();
      expect(when([...running, reached], { type: 'EnforceTimeLimit', now: at(95) })).toEqual([]);
    });

    it('fails the job as timeLimit, without a retry, however the stopped attempt ends', () => {
      const ends = [
        { kind: 'exited', exitCode: 0 },
        { kind: 'signalled', signal: 'SIGTERM' },
      ] as const;
      for (const exit of ends) {
        const [event] = when([...running, reached], {
          type: 'FinishAttempt',
          attemptId: 'a1',
          exit,
          durationMs: 90_000,
          now: at(91),
          jitter: 0,
        });
        expect(event).toMatchObject({
          type: 'JobAttemptFailed',
          data: { failure: { reason: 'timeLimit', kind: 'user', retryable: false }, retry: null },
        });
        expect(event!.type === 'JobAttemptFailed' && event.data.failure.message).toContain(
          'time limit of 90s',
        );
      }
      const [lost] = when([...running, reached], {
        type: 'FailAttempt',
        attemptId: 'a1',
        failure: failure('workerLost', 'gone'),
        now: at(91),
        jitter: 0,
      });
      expect(lost).toMatchObject({ data: { failure: { reason: 'timeLimit' }, retry: null } });
    });

    it('keeps the outcome of an attempt its worker timed within the limit, whenever its report came', () => {
      const finish = (exit: { kind: 'exited'; exitCode: number }, durationMs: number) =>
        when([...running, reached], {
          type: 'FinishAttempt',
          attemptId: 'a1',
          exit,
          durationMs,
          now: at(200),
          jitter: 0,
        })[0];
      expect(finish({ kind: 'exited', exitCode: 0 }, 89_000)).toEqual({
        type: 'JobSucceeded',
        data: { attemptId: 'a1', durationMs: 89_000 },
      });
      expect(finish({ kind: 'exited', exitCode: 2 }, 89_000)).toMatchObject({
        data: { failure: { reason: 'nonZeroExit' } },
      });
      expect(finish({ kind: 'exited', exitCode: 0 }, 90_000)).toMatchObject({
        data: { failure: { reason: 'timeLimit' } },
      });
      // Stopped by its worker: it did not end by itself, whatever the clocks say.
      const stopped = when([...running, reached], {
        type: 'FinishAttempt',
        attemptId: 'a1',
        exit: { kind: 'exited', exitCode: 0 },
        durationMs: 89_990,
        stopped: true,
        now: at(200),
        jitter: 0,
      })[0];
      expect(stopped).toMatchObject({ data: { failure: { reason: 'timeLimit' } } });
    });

    it('fails as timeLimit an attempt its worker stopped past the limit when no stop came', () => {
      const stopped = (timeLimited: boolean, exitCode = 143) =>
        when(running, {
          type: 'FinishAttempt',
          attemptId: 'a1',
          exit: { kind: 'exited', exitCode },
          // Its worker's clock says nothing: its word that it stopped it at the limit does.
          durationMs: 30_000,
          stopped: true,
          ...(timeLimited && { timeLimited }),
          now: at(200),
          jitter: 0,
        })[0];
      for (const exitCode of [0, 143]) {
        expect(stopped(true, exitCode)).toMatchObject({
          type: 'JobAttemptFailed',
          data: { failure: { reason: 'timeLimit' }, retry: null },
        });
      }
      // Stopped without a cancel, a preemption or a time limit on record: its own exit.
      expect(stopped(false)).toMatchObject({ data: { failure: { reason: 'nonZeroExit' } } });
      const unlimited = [submitted(), assigned(), started()];
      const [noLimit] = when(unlimited, {
        type: 'FinishAttempt',
        attemptId: 'a1',
        exit: { kind: 'exited', exitCode: 0 },
        durationMs: 30_000,
        stopped: true,
        timeLimited: true,
        now: at(200),
        jitter: 0,
      });
      expect(noLimit).toMatchObject({ type: 'JobSucceeded' });
      // Past its limit but not stopped: it ended by itself, as it did.
      const [ended] = when(running, {
        type: 'FinishAttempt',
        attemptId: 'a1',
        exit: { kind: 'exited', exitCode: 0 },
        durationMs: 150_000,
        now: at(200),
        jitter: 0,
      });
      expect(ended).toMatchObject({ type: 'JobSucceeded' });
    });

    it('limits nothing that is not running: no limit, a probe, a cancel, an attempt not started', () => {
      const late = { type: 'EnforceTimeLimit' as const, now: at(3600) };
      const cases: JobEvent[][] = [
        [submitted(), assigned(), started()],
        [limited, assigned()],
        [
          submitted(spec({ timeLimit: 90, resources: { gpus: 1 } })),
          { ...assigned(), data: { ...assigned().data, probe: true } } as JobEvent,
          started(),
        ],
        [...running, { type: 'JobCancelRequested', data: { attemptId: 'a1', workerId: 'w1' } }],
      ];
      for (const events of cases) {
        expect(timeLimitDeadline(given(events))).toBeNull();
        expectRejected(() => when(events, late), 'INVALID_TRANSITION');
      }
      expectRejected(() => when([], late), 'JOB_NOT_FOUND');
    });

    it('counts from the start of each attempt: a retry gets the whole limit again', () => {
      const failedOnce: JobEvent = {
        type: 'JobAttemptFailed',
        data: {
          attemptId: 'a1',
          exitCode: null,
          failure: failure('workerLost', 'gone'),
          durationMs: 1,
          retry: { retryAt: T0.toISOString(), backoffMs: 0 },
        },
      };
      const retried = [...running, failedOnce, assigned('a2', 2)];
      expect(timeLimitDeadline(given(retried))).toBeNull();
      const state = evolveJob(given(retried), started('a2'), at(600).toISOString());
      expect(timeLimitDeadline(state)).toBe(at(690).getTime());
    });
  });

  it('cancels instead of starting when the cancel came before the start', () => {
    const events = when(
      [
        submitted(),
        assigned(),
        { type: 'JobCancelRequested', data: { attemptId: 'a1', workerId: 'w1' } },
      ],
      {
        type: 'StartAttempt',
        attemptId: 'a1',
      },
    );
    expect(events).toEqual([{ type: 'JobCancelled', data: { attemptId: 'a1' } }]);
  });

  it('refuses to cancel a finished job and fences late reports', () => {
    const done = [
      submitted(),
      assigned(),
      started(),
      { type: 'JobSucceeded' as const, data: { attemptId: 'a1', durationMs: 1 } },
    ];
    expectRejected(() => when(done, { type: 'CancelJob' }), 'JOB_FINISHED');
    expectRejected(
      () => when(done, { type: 'SyncOutputs', attemptId: 'a1', files: [] }),
      'STALE_ATTEMPT',
    );
  });

  it('records a login while the job lives, and none once it has ended', () => {
    const login = {
      type: 'RecordLogin' as const,
      user: null,
      method: 'password' as const,
      accepted: false,
      reason: 'notRunning',
      source: '10.0.0.1',
    };
    const succeeded: JobEvent = { type: 'JobSucceeded', data: { attemptId: 'a1', durationMs: 1 } };
    expect(when([submitted(), assigned(), started()], login)).toEqual([
      {
        type: 'JobLogin',
        data: {
          user: null,
          method: 'password',
          accepted: false,
          reason: 'notRunning',
          source: '10.0.0.1',
        },
      },
    ]);
    expect(when([submitted(), assigned(), started(), succeeded], login)).toEqual([]);
  });

  it('refuses commands on a job that does not exist', () => {
    expectRejected(() => when([], { type: 'CancelJob' }), 'JOB_NOT_FOUND');
  });
});

describe('build claims', () => {
  const code = { key: 'k', sizeBytes: 1, sha256: 'a'.repeat(64), format: 'zip' as const };
  const building = [
    { type: 'JobSubmitted' as const, data: { owner: 'alice', spec: spec(), code } },
    { type: 'JobBuildStarted' as const, data: { builderId: 'builder-1' } },
  ];

  it('lets only one builder claim a build', () => {
    expect(given(building)).toMatchObject({ status: 'building', builderId: 'builder-1' });
    expectRejected(
      () => when(building, { type: 'StartBuild', builderId: 'builder-2' }),
      'INVALID_TRANSITION',
    );
  });

  it('hands a build over from a builder that is gone, and only from that one', () => {
    expect(
      when(building, { type: 'ReclaimBuild', builderId: 'builder-2', goneBuilderId: 'builder-1' }),
    ).toEqual([{ type: 'JobBuildStarted', data: { builderId: 'builder-2' } }]);
    expectRejected(
      () =>
        when(building, {
          type: 'ReclaimBuild',
          builderId: 'builder-3',
          goneBuilderId: 'builder-9',
        }),
      'INVALID_TRANSITION',
    );
  });
});

describe('the end of a job', () => {
  it('is its success, cancel, failed build, or a failed attempt with no retry', () => {
    const failure = {
      kind: 'user' as const,
      reason: 'nonZeroExit',
      message: 'x',
      retryable: false,
    };
    const failed = (retry: { retryAt: string; backoffMs: number } | null) => ({
      type: 'JobAttemptFailed' as const,
      data: { attemptId: 'a1', exitCode: 1, failure, durationMs: 1, retry },
    });
    expect(endsJob({ type: 'JobSucceeded', data: { attemptId: 'a1', durationMs: 1 } })).toBe(true);
    expect(endsJob({ type: 'JobCancelled', data: {} })).toBe(true);
    expect(endsJob({ type: 'JobBuildFailed', data: { failure } })).toBe(true);
    expect(endsJob(failed(null))).toBe(true);
    expect(endsJob(failed({ retryAt: T0.toISOString(), backoffMs: 5 }))).toBe(false);
    expect(endsJob(started())).toBe(false);
  });
});
