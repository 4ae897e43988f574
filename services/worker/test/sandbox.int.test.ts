import { createWriteStream } from 'node:fs';
import { access, mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunAttempt } from '@trainyard/events';
import {
  DEFAULT_ARCHIVE_LIMITS,
  JetStreamBlobStore,
  packDirectory,
  putFile,
  type BlobStore,
} from '@trainyard/blobs';
import { ProcessRuntime } from '@trainyard/runtime';
import { connectBus } from '@trainyard/service-kit';
import { startTestNats, tempDir, waitFor } from '@trainyard/testkit';
import {
  leftSandboxes,
  markSandbox,
  prepareSandbox,
  removeSandbox,
  runSpecIn,
  type Sandbox,
} from '../src/sandbox.ts';
import { SandboxError } from '../src/code.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir('trainyard-sandboxes-');
});
afterAll(async () => dir.remove());

const noBlobs = {} as BlobStore;

function attempt(jobId: string): RunAttempt {
  return {
    v: 1,
    kind: 'run',
    jobId,
    attemptId: `att_${jobId}`,
    attempt: 1,
    gpus: [],
    command: 'sleep 30',
    env: {},
    artifact: null,
    code: null,
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
    const startedBox = await prepareSandbox(dir.path, started, noBlobs, DEFAULT_ARCHIVE_LIMITS);
    markSandbox(startedBox, started, Date.now());
    const proc = await run(startedBox, started);
    await waitFor('the process to record its group', () => exists(startedBox.pidFile));

    const neverStarted = attempt('job_never');
    const neverBox = await prepareSandbox(dir.path, neverStarted, noBlobs, DEFAULT_ARCHIVE_LIMITS);
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

describe('a sandbox', () => {
  it('is made afresh over what an earlier try left, under a root that does not exist yet', async () => {
    const root = join(dir.path, 'not-yet');
    const msg = attempt('job_again');
    const first = await prepareSandbox(root, msg, noBlobs, DEFAULT_ARCHIVE_LIMITS);
    await writeFile(join(first.workDir, 'stale.txt'), 'old');
    markSandbox(first, msg, Date.now());
    const again = await prepareSandbox(root, msg, noBlobs, DEFAULT_ARCHIVE_LIMITS);
    expect(again.root).toBe(first.root);
    expect((await readdir(again.root)).sort()).toEqual(['metrics', 'outputs', 'run', 'work']);
    expect(await readdir(again.workDir)).toEqual([]);
    await removeSandbox(again);
    expect(await exists(again.root)).toBe(false);
  });

  it('is removed whole once its attempt ended, with whatever the command left in it', async () => {
    const msg = {
      ...attempt('job_leaves'),
      command:
        'mkdir -p a/b && echo x > a/b/c && echo y > "$TRAINYARD_OUTPUT_DIR/out.txt" && ' +
        'echo \'{"loss": 1}\' >> "$TRAINYARD_METRICS_FILE" && ' +
        'ln -s "$TRAINYARD_OUTPUT_DIR" "$TRAINYARD_METRICS_FILE.link"',
    };
    const box = await prepareSandbox(dir.path, msg, noBlobs, DEFAULT_ARCHIVE_LIMITS);
    markSandbox(box, msg, Date.now());
    const proc = await run(box, msg);
    expect(await proc.exited).toEqual({ kind: 'exited', exitCode: 0 });
    await mkdir(join(box.outputDir, 'deep', 'er'), { recursive: true });
    expect(await readFile(box.metricsFile, 'utf8')).toBe('{"loss": 1}\n');
    const outside = join(dir.path, 'outside');
    await writeFile(outside, 'kept');
    await symlink(outside, join(box.metricsDir, 'to-outside'));
    await removeSandbox(box);
    expect(await exists(box.root)).toBe(false);
    expect(await readFile(outside, 'utf8')).toBe('kept');

    const quiet = { ...attempt('job_quiet'), command: 'true' };
    const empty = await prepareSandbox(dir.path, quiet, noBlobs, DEFAULT_ARCHIVE_LIMITS);
    markSandbox(empty, quiet, Date.now());
    expect(await (await run(empty, quiet)).exited).toEqual({ kind: 'exited', exitCode: 0 });
    await removeSandbox(empty);
    expect(await exists(empty.root)).toBe(false);
  });
});

describe('the code a sandbox is filled with', () => {
  it('is refused when the store holds other bytes than the dispatch names', async () => {
    const nats = await startTestNats();
    const bus = await connectBus(nats.url, 'sandbox-test');
    try {
      const blobs = await JetStreamBlobStore.open(bus.js, 'sandboxtest');
      const src = join(dir.path, 'src');
      await mkdir(src, { recursive: true });
      await writeFile(join(src, 'train.sh'), 'echo hi\n');
      const packed = join(dir.path, 'code.tar.gz');
      await pipeline(packDirectory(src), createWriteStream(packed));
      const ref = await putFile(blobs, 'jobs/job_fill/artifact.tar.gz', packed);

      const good = { ...attempt('job_fill'), artifact: ref };
      const box = await prepareSandbox(dir.path, good, blobs, DEFAULT_ARCHIVE_LIMITS);
      expect(await readdir(box.workDir)).toEqual(['train.sh']);
      await removeSandbox(box);

      // The same key holds other bytes now: someone replaced the artifact in the store.
      await blobs.put(ref.key, Buffer.from('not the artifact'));
      const swapped = { ...attempt('job_swap'), artifact: ref };
      const refused = await prepareSandbox(dir.path, swapped, blobs, DEFAULT_ARCHIVE_LIMITS).catch(
        (err: unknown) => err,
      );
      expect(refused).toBeInstanceOf(SandboxError);
      expect((refused as SandboxError).failure).toMatchObject({
        reason: 'artifactUnavailable',
        message: expect.stringMatching(/sha256 differs/),
      });
    } finally {
      await bus.close();
      await nats.stop();
    }
  });
});
