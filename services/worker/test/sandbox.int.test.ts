import { access } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobState } from '@trainyard/domain';
import { ProcessRuntime, type BlobStore, type RunAttempt } from '@trainyard/platform';
import { tempDir, waitFor } from '@trainyard/testkit';
import {
  leftSandboxes,
  markSandbox,
  prepareSandbox,
  runSpecIn,
  type Sandbox,
} from '../src/sandbox.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir('trainyard-sandboxes-');
});
afterAll(async () => dir.remove());

const noBlobs = {} as BlobStore;

function attempt(jobId: string): RunAttempt {
  return {
    kind: 'run',
    jobId,
    attemptId: `att_${jobId}`,
    attempt: 1,
    gpus: [],
    command: 'sleep 30',
    env: {},
    artifact: null,
    code: null,
    job: { id: jobId, attempts: [] } as unknown as JobState,
    head: { seq: 1, hash: 'h' },
  };
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

const runtime = new ProcessRuntime();
afterAll(() => runtime.close());

function run(box: Sandbox, msg: RunAttempt) {
  return runtime.start(runSpecIn(box, msg), () => undefined);
}

describe('sandboxes a worker left behind', () => {
  it('gives back the one whose process started, with the group the process recorded; removes the rest', async () => {
    const started = attempt('job_started');
    const startedBox = await prepareSandbox(dir.path, started, noBlobs);
    markSandbox(startedBox, started, Date.now());
    const proc = await run(startedBox, started);
    await waitFor('the process to record its group', () => exists(startedBox.pidFile));

    const neverStarted = attempt('job_never');
    const neverBox = await prepareSandbox(dir.path, neverStarted, noBlobs);
    markSandbox(neverBox, neverStarted, Date.now());

    try {
      const found = await leftSandboxes(dir.path);
      expect(found.map((f) => f.marker.msg.attemptId)).toEqual([started.attemptId]);
      expect(found[0]!.marker.pid).toBe(proc.pid);
      expect(found[0]!.box.root).toBe(startedBox.root);
      expect(await exists(neverBox.root)).toBe(false);
    } finally {
      await proc.kill(100);
    }
  });
});
