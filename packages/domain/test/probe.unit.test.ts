import { describe, expect, it } from 'vitest';
import type { JobEvent, JobSpec } from '@trainyard/events';
import { decideJob, GiB, probeOutcome, type ProbeReport, type ProcessExit } from '../src/index.ts';
import { given, spec, T0 } from './given.ts';

const unmeasured = spec({ resources: { gpus: 1 } });

const report = (over: Partial<ProbeReport> = {}): ProbeReport => ({
  steps: 5,
  done: true,
  device: 'cuda',
  peakVramBytes: 3 * GiB,
  peakRssBytes: 2 * GiB,
  stepMs: 12.5,
  ...over,
});

const exited = (exitCode: number): ProcessExit => ({ kind: 'exited', exitCode });

/** The events of a job whose probe has been assigned (and started). */
function probing(s: JobSpec = unmeasured): JobEvent[] {
  const submittedEvents = decideJob({ type: 'SubmitJob', owner: 'alice', spec: s }, given([]));
  const state = given(submittedEvents);
  const assignedEvents = decideJob(
    { type: 'AssignJob', attemptId: 'p1', workerId: 'w1', gpus: [0], vramBytes: 80 * GiB, cpus: 0 },
    state,
  );
  return [...submittedEvents, ...assignedEvents, { type: 'JobStarted', data: { attemptId: 'p1' } }];
}

const finishProbe = (r: ProbeReport | null, exit = exited(0), timedOut = false) => ({
  type: 'FinishProbe' as const,
  attemptId: 'p1',
  exit,
  report: r,
  timedOut,
  durationMs: 900,
  now: T0,
  jitter: 0,
});

describe('the probe, in the job decider', () => {
  it('is decided at submission for a job that asks for GPUs and declares no VRAM, and for no other', () => {
    const decide = (s: JobSpec) =>
      decideJob({ type: 'SubmitJob', owner: 'a', spec: s }, given([]))[0]!;
    const data = (e: JobEvent) => (e.type === 'JobSubmitted' ? e.data : null);
    expect(data(decide(unmeasured))?.estimate).toBe(true);
    expect(data(decide(spec({ resources: { gpus: 1, vramGb: 4 } })))?.estimate).toBe(false);
    expect(data(decide(spec({ resources: { gpus: 0 } })))?.estimate).toBe(false);
    expect(given([decide(unmeasured)]).status).toBe('estimating');
  });

  it('keeps the job estimating while its probe is assigned and runs, then queues it with the estimate', () => {
    const events = probing();
    expect(events[1]).toMatchObject({ type: 'JobAssigned', data: { probe: true, attempt: 1 } });
    const state = given(events);
    expect(state.status).toBe('estimating');
    expect(state.attempts[0]).toMatchObject({ probe: true, status: 'running' });
    const [estimated] = decideJob(finishProbe(report()), state);
    expect(estimated).toEqual({
      type: 'JobEstimated',
      data: {
        attemptId: 'p1',
        durationMs: 900,
        estimate: { vramBytes: 3 * GiB, ramBytes: 2 * GiB, stepMs: 12.5, steps: 5, device: 'cuda' },
      },
    });
    const after = given([...events, estimated!]);
    expect(after.status).toBe('queued');
    expect(after.attempts[0]).toMatchObject({ status: 'succeeded', probe: true });
    const [next] = decideJob(
      {
        type: 'AssignJob',
        attemptId: 'a2',
        workerId: 'w1',
        gpus: [0],
        vramBytes: 3 * GiB,
        cpus: 0,
      },
      after,
    );
    expect(next).toMatchObject({ type: 'JobAssigned', data: { attempt: 2 } });
    expect(next!.type === 'JobAssigned' && next.data.probe).toBeUndefined();
  });

  it('builds first, then probes', () => {
    const [submitted] = decideJob(
      {
        type: 'SubmitJob',
        owner: 'a',
        spec: unmeasured,
        code: { key: 'k', sizeBytes: 1, sha256: 'a'.repeat(64), format: 'zip' },
      },
      given([]),
    );
    const built: JobEvent[] = [
      submitted!,
      { type: 'JobBuildStarted', data: { builderId: 'b' } },
      {
        type: 'JobBuilt',
        data: { artifact: { key: 'art', sizeBytes: 1, sha256: 'b'.repeat(64) }, durationMs: 1 },
      },
    ];
    expect(given(built.slice(0, 1)).status).toBe('submitted');
    expect(given(built).status).toBe('estimating');
  });

  it('refuses outputs and a plain finish from a probe, and a probe’s finish from a run', () => {
    const state = given(probing());
    expect(() => decideJob({ type: 'SyncOutputs', attemptId: 'p1', files: [] }, state)).toThrow(
      /probe/,
    );
    expect(() =>
      decideJob(
        {
          type: 'FinishAttempt',
          attemptId: 'p1',
          exit: exited(0),
          durationMs: 1,
          now: T0,
          jitter: 0,
        },
        state,
      ),
    ).toThrow(/probe/);
  });

  it('fails the job as its own fault when the probe measured nothing, and retries a probe that could not launch', () => {
    const state = given(probing());
    const failed = (r: ProbeReport | null, exit = exited(0), timedOut = false) => {
      const [e] = decideJob(finishProbe(r, exit, timedOut), state);
      if (e?.type !== 'JobAttemptFailed') throw new Error(`expected a failure, got ${e?.type}`);
      return e.data;
    };
    expect(failed(null)).toMatchObject({
      exitCode: null,
      failure: { kind: 'user', reason: 'probeNotPython' },
      retry: null,
    });
    expect(failed(report({ steps: 0, done: false }))).toMatchObject({
      failure: { kind: 'user', reason: 'probeNoStep' },
      retry: null,
    });
    expect(failed(report({ steps: 2, done: false }), exited(3))).toMatchObject({
      exitCode: 3,
      failure: {
        kind: 'user',
        reason: 'probeCrashed',
        message: expect.stringContaining('after 2 optimizer steps'),
      },
    });
    expect(
      failed(report({ steps: 0, done: false }), { kind: 'signalled', signal: 'SIGTERM' }, true)
        .failure,
    ).toMatchObject({ reason: 'probeNoStep', message: expect.stringContaining('time limit') });
    const launch = failed(null, { kind: 'launch-error', message: 'no image' });
    expect(launch.failure).toMatchObject({ kind: 'system', reason: 'launchError' });
    expect(launch.retry).not.toBeNull();
    expect(given([...probing(), { type: 'JobAttemptFailed', data: launch }]).status).toBe(
      'retrying',
    );
  });

  it('cancels a probe like any attempt', () => {
    const state = given(probing());
    const [requested] = decideJob({ type: 'CancelJob' }, state);
    expect(requested).toMatchObject({ type: 'JobCancelRequested', data: { attemptId: 'p1' } });
    const [cancelled] = decideJob(finishProbe(report()), given([...probing(), requested!]));
    expect(cancelled).toEqual({ type: 'JobCancelled', data: { attemptId: 'p1' } });
  });
});

describe('probeOutcome', () => {
  it('takes what a probe measured before its script ended on its own, or before its time ran out', () => {
    expect(probeOutcome(exited(0), report({ done: false, steps: 1, stepMs: null }), false)).toEqual(
      {
        estimate: { vramBytes: 3 * GiB, ramBytes: 2 * GiB, stepMs: null, steps: 1, device: 'cuda' },
      },
    );
    expect(
      probeOutcome(
        { kind: 'signalled', signal: 'SIGTERM' },
        report({ done: false, steps: 4 }),
        true,
      ),
    ).toHaveProperty('estimate.steps', 4);
    expect(probeOutcome({ kind: 'oom' }, report(), false)).toHaveProperty(
      'failure.reason',
      'oomKilled',
    );
  });

  it('counts no VRAM for a script that ran on the CPU', () => {
    expect(
      probeOutcome(exited(0), report({ device: 'cpu', peakVramBytes: null }), false),
    ).toHaveProperty('estimate.vramBytes', 0);
  });
});
