import { describe, expect, it } from 'vitest';
import type { JobEvent, JobSpec } from '@trainyard/events';
import {
  decideJob,
  emptyCluster,
  evolveCluster,
  GiB,
  plan,
  probeOutcome,
  type ClusterState,
  type JobState,
  type ProbeReport,
  type ProcessExit,
} from '../src/index.ts';
import { given, spec, stored, T0 } from './given.ts';

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
    expect(placed.map((a) => [a.jobId, a.gpus, a.vramBytes / GiB])).toEqual([
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
      { jobId: 'j', workerId: 'w1', gpus: [1], vramBytes: 80 * GiB, cpus: 0 },
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
      { jobId: 'old', workerId: 'w1', gpus: [0], vramBytes: 24 * GiB, cpus: 0 },
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
    expect(plan(c, T0).assignments.map((a) => a.jobId)).toEqual(['ram-9', 'cpu-6']);
    const uncounted = cluster([80]);
    measured(uncounted, 'ram-9', 1, 9);
    measured(uncounted, 'ram-8', 1, 8);
    expect(plan(uncounted, T0).assignments.map((a) => a.jobId)).toEqual(['ram-9', 'ram-8']);
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
    expect(plan(c, T0).assignments.map((a) => a.jobId)).toEqual(['ram-8']);
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
    expect(plan(c, T0).assignments.map((a) => [a.jobId, a.gpus, a.vramBytes / GiB])).toEqual([
      ['huge', [0], 80],
      ['cpu-only', [1], 0.5],
    ]);
  });

  it('places a job that asks more memory than a host has on a host nothing else uses', () => {
    const c = cluster([80], 16);
    submit(c, 'big', spec({ resources: { gpus: 0, memoryGb: 64 } }), false);
    submit(c, 'small', spec({ resources: { gpus: 0, memoryGb: 1 } }), false);
    expect(plan(c, T0).assignments.map((a) => a.jobId)).toEqual(['big']);
  });

  it('sends a probe only to a worker that reads the dispatch contract of probes', () => {
    const old = cluster([80], undefined, 1);
    submit(old, 'j', unmeasured, true);
    submit(old, 'declared', spec({ resources: { gpus: 1, vramGb: 4 } }), false);
    expect(plan(old, T0).assignments.map((a) => a.jobId)).toEqual(['declared']);
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
    expect(plan(c, T0).assignments.map((a) => a.jobId)).toEqual(['first']);
  });
});
