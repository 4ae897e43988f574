import { describe, expect, it } from 'vitest';
import { DISPATCH_VERSION, DispatchMessageSchema } from '../src/index.ts';

const run = {
  kind: 'run',
  jobId: 'job_1',
  attemptId: 'att_1',
  attempt: 1,
  gpus: [0],
  command: 'python train.py',
  env: { SEED: '1' },
  artifact: null,
  code: null,
};

describe('the dispatch contract', () => {
  it('reads a message of its version, and one sent before versions as version 1', () => {
    expect(DispatchMessageSchema.parse({ ...run, v: 1 })).toEqual({ ...run, v: 1 });
    const probe = { maxSteps: 20, plateauSteps: 2, timeoutMs: 600_000 };
    expect(DispatchMessageSchema.parse({ ...run, v: 2, probe })).toEqual({ ...run, v: 2, probe });
    const member = { ...run, v: 5, rank: 1 };
    expect(DispatchMessageSchema.parse(member)).toEqual(member);
    const session = {
      v: 4,
      kind: 'session',
      sessionId: 'ses_1',
      runId: 'run_1',
      run: 1,
      gpus: [0],
      resources: { vramBytes: 1024, cpus: 0 },
      headSeq: 7,
    };
    expect(DispatchMessageSchema.parse(session)).toEqual(session);
    expect(DispatchMessageSchema.safeParse({ ...session, v: 2 }).success).toBe(false);
    expect(DispatchMessageSchema.parse(run)).toMatchObject({ v: 1, kind: 'run' });
    expect(
      DispatchMessageSchema.parse({ kind: 'stop', jobId: 'job_1', attemptId: 'att_1' }),
    ).toEqual({ v: 1, kind: 'stop', jobId: 'job_1', attemptId: 'att_1' });
  });

  it('carries what the attempt was given and the log position it was derived from', () => {
    const given = {
      ...run,
      v: 1,
      resources: { vramBytes: 8 * 1024 ** 3, cpus: 2, memoryGb: 16 },
      headSeq: 42,
    };
    expect(DispatchMessageSchema.parse(given)).toEqual(given);
    expect(DispatchMessageSchema.safeParse({ ...given, headSeq: 0 }).success).toBe(false);
    expect(
      DispatchMessageSchema.safeParse({ ...given, resources: { vramBytes: -1, cpus: 0 } }).success,
    ).toBe(false);
  });

  it('refuses a version it does not know, and a message missing what a worker needs', () => {
    expect(DispatchMessageSchema.safeParse({ ...run, v: DISPATCH_VERSION + 1 }).success).toBe(
      false,
    );
    expect(
      DispatchMessageSchema.safeParse({
        ...run,
        v: 2,
        probe: { maxSteps: 0, plateauSteps: 2, timeoutMs: 1 },
      }).success,
    ).toBe(false);
    const { command: _command, ...noCommand } = run;
    expect(DispatchMessageSchema.safeParse(noCommand).success).toBe(false);
    expect(DispatchMessageSchema.safeParse({ ...run, kind: 'state' }).success).toBe(false);
  });
});
