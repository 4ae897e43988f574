import { mkdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, testDocker, waitFor } from '@trainyard/testkit';
import {
  DEFAULT_BASE_IMAGE,
  DockerRuntime,
  installProbe,
  Labels,
  readProbeReport,
  shellQuote,
  type RunSpec,
} from '../src/index.ts';
import { intOrQuitIgnored, PRINT_IGNORED, runSpecIn } from './run-spec.ts';

const { docker, registry } = testDocker();
let dir: Awaited<ReturnType<typeof tempDir>>;
/** The default base image as a job's image is: in the registry, named by digest. */
let image: string;
const runtime = new DockerRuntime({ docker, workerName: 'w-docker-test', gpuDevices: 'none' });
let attempts = 0;

/** Pushes a local image to the test registry; its reference by digest. */
async function pushed(local: string, repo: string): Promise<string> {
  const tagged = `${registry}/${repo}`;
  await docker.getImage(local).tag({ repo: tagged, tag: '1' });
  const stream = await docker
    .getImage(`${tagged}:1`)
    .push({ authconfig: { serveraddress: registry } });
  const events: { aux?: { Digest?: string }; error?: string }[] = await new Promise(
    (resolve, reject) =>
      docker.modem.followProgress(stream, (err, out) => (err ? reject(err) : resolve(out))),
  );
  const digest = events.find((e) => e.aux?.Digest)?.aux?.Digest;
  if (!digest) throw new Error(`no digest in the push of ${tagged}`);
  await docker.getImage(`${tagged}:1`).remove();
  return `${tagged}@${digest}`;
}

beforeAll(async () => {
  dir = await tempDir('trainyard-docker-rt-');
  image = await pushed(DEFAULT_BASE_IMAGE, 'test/runtime-base');
});
afterAll(async () => {
  await runtime.sweep(new Set());
  await dir.remove();
});

/** A run of `command` in the job image, with a sandbox of its own. */
function spec(command: string, over: Partial<RunSpec> = {}): RunSpec {
  const n = ++attempts;
  const box = join(dir.path, `a${n}`);
  mkdirSync(join(box, 'out'), { recursive: true });
  return runSpecIn(box, command, {
    jobId: `job_d${n}`,
    attemptId: `att_d${n}`,
    outputDir: join(box, 'out'),
    image,
    ...over,
  });
}

const logOf = (s: RunSpec) => readFile(s.logFile, 'utf8');

/** The default base with more in its config (kept by a commit), in the registry, by digest. */
async function baseWith(name: string, config: Docker.ContainerCreateOptions): Promise<string> {
  const base = await docker.createContainer({
    Image: DEFAULT_BASE_IMAGE,
    Cmd: ['true'],
    ...config,
  });
  const committed = (await base.commit({ repo: `trainyard-test/${name}`, tag: '1' })) as {
    Id: string;
  };
  await base.remove();
  expect(committed.Id).toMatch(/^sha256:/);
  const served = await pushed(`trainyard-test/${name}:1`, `test/${name}`);
  await docker.getImage(committed.Id).remove({ force: true });
  return served;
}

describe('Docker runtime', () => {
  it('pulls the image by digest and runs the command as a user that is not root, with its environment, outputs, labels, SIGINT and SIGQUIT at their default', async () => {
    const s = spec(
      // It runs a moment before it speaks, so that the runtime finds it running and records its pid.
      `sleep 0.5; echo "uid=$(id -u) out=$TRAINYARD_OUTPUT_DIR job=$TRAINYARD_JOB_ID pwd=$(pwd) cuda=$CUDA_VISIBLE_DEVICES greet=$GREETING"; echo saved > "$TRAINYARD_OUTPUT_DIR/result.txt"; ${PRINT_IGNORED}; echo oops >&2; exit 3`,
      { env: { GREETING: 'hi there' }, gpus: [2, 5] },
    );
    const out: string[] = [];
    const run = await runtime.start(s, (_stream, chunk) => out.push(chunk.toString()));
    const container = (await docker.listContainers({ all: true })).find(
      (c) => c.Labels[Labels.attempt] === s.attemptId,
    );
    expect(container?.Labels).toMatchObject({
      [Labels.job]: s.jobId,
      [Labels.worker]: 'w-docker-test',
    });
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 3 });
    const text = out.join('');
    expect(text).toContain(
      `uid=65534 out=/trainyard/outputs job=${s.jobId} pwd=/workspace cuda=0,1 greet=hi there`,
    );
    expect(text).toContain('oops');
    expect(intOrQuitIgnored(text)).toEqual([[]]);
    expect(await logOf(s)).toBe(text);
    expect(await readFile(join(s.outputDir, 'result.txt'), 'utf8')).toBe('saved\n');
    expect(await readFile(s.pidFile, 'utf8')).toMatch(/^\d+\n$/);
    await runtime.remove(s.attemptId);
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`${Labels.attempt}=${s.attemptId}`] },
    });
    expect(left).toEqual([]);
  });

  it('runs a probe’s command under the wrapper it mounts, which reports where the worker reads it', async () => {
    const s = spec(
      'echo "path=$PYTHONPATH"; python3 -c "import sys; print(\'probe\' in sys.modules[\'sitecustomize\'].__file__)"',
      { env: { PYTHONPATH: '/opt/lib' } },
    );
    const probeDir = join(s.workDir, 'probe');
    installProbe(probeDir);
    const probed = { ...s, probe: { dir: probeDir, maxSteps: 20, plateauSteps: 2 } };
    const run = await runtime.start(probed, () => undefined);
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
    const text = await logOf(probed);
    expect(text).toContain('path=/trainyard/probe:/opt/lib\nTrue\n');
    expect(readProbeReport(probeDir)).toMatchObject({ python: true, steps: 0, done: false });
  });

  it('runs the command itself in an image whose entrypoint would take it as arguments (a server’s)', async () => {
    const served = await baseWith('entrypoint', { Entrypoint: ['/bin/false'] });
    const s = spec('echo "the job’s own command"', { image: served });
    const run = await runtime.start(s, () => undefined);
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
    expect(await logOf(s)).toBe('the job’s own command\n');
  });

  it('runs as the uid the worker gives the attempt, with no capabilities', async () => {
    const s = spec('id -u; grep CapEff /proc/self/status', {
      user: { uid: 2345678, gid: 2345678 },
    });
    const run = await runtime.start(s, () => undefined);
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
    const text = await logOf(s);
    expect(text).toContain('2345678\n');
    expect(text).toMatch(/CapEff:\s+0+\n/);
  });

  it('reports an out-of-memory kill under the memory limit as oom', async () => {
    const s = spec('python3 -c "x = bytearray(512 * 1024 * 1024); print(len(x))"', {
      memoryBytes: 64 * 1024 ** 2,
    });
    const run = await runtime.start(s, () => undefined);
    expect(await run.exited).toEqual({ kind: 'oom' });
  });

  it('stops the container on cancel: its command hears SIGTERM', async () => {
    const s = spec("trap 'echo got-term; exit 143' TERM; echo ready; while :; do sleep 0.1; done");
    const run = await runtime.start(s, () => undefined);
    await waitFor('the command to start', async () =>
      (await logOf(s).catch(() => '')).includes('ready'),
    );
    const started = Date.now();
    await run.kill(5_000);
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(await logOf(s)).toContain('got-term');
  });

  it('gives a program that saves its work on SIGTERM its grace, though the shell above it ends at once', async () => {
    const program = [
      'import os, signal, sys, time',
      'def save(*_):',
      '    time.sleep(1)',
      '    open(os.environ["TRAINYARD_OUTPUT_DIR"] + "/saved", "w").write("saved\\n")',
      '    sys.exit(0)',
      'signal.signal(signal.SIGTERM, save)',
      'print("ready", flush=True)',
      'time.sleep(30)',
    ].join('\n');
    // The job's environment names the variables of the shell above its command, a process of
    // the job in a session of its own hears the stop too, and the image would stop with SIGQUIT.
    const env = { __ty_stopped: '1', __ty_code: '5' };
    const quits = await baseWith('quits', { StopSignal: 'SIGQUIT' });
    const command = `setsid sleep 100 & python3 -c ${shellQuote(program)}; true`;
    const s = spec(command, { env, image: quits });
    const run = await runtime.start(s, () => undefined);
    await waitFor('the program to start', async () =>
      (await logOf(s).catch(() => '')).includes('ready'),
    );
    const started = Date.now();
    // A second stop in the grace changes nothing.
    await Promise.all([run.kill(10_000), delay(300).then(() => run.kill(10_000))]);
    expect(await readFile(join(s.outputDir, 'saved'), 'utf8')).toBe('saved\n');
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    expect(Date.now() - started).toBeLessThan(5_000);

    const ended = await runtime.start(spec('sleep 30 & echo done', { env }), () => undefined);
    expect(await ended.exited).toEqual({ kind: 'exited', exitCode: 0 });
  });

  it('reports an image it cannot pull as a launch error', async () => {
    const s = spec('true', { image: `${registry}/test/nosuch@sha256:${'0'.repeat(64)}` });
    const run = await runtime.start(s, () => undefined);
    const exit = await run.exited;
    expect(exit.kind).toBe('launch-error');
  });

  it('is taken over by a restarted worker, which reads the output on without repeating it', async () => {
    const s = spec(
      'i=0; while [ $i -lt 30 ]; do echo line $i; i=$((i+1)); sleep 0.05; done; exit 7',
    );
    const before = new DockerRuntime({ docker, workerName: 'w-docker-test', gpuDevices: 'none' });
    await before.start(s, () => undefined);
    await waitFor('some output', async () => (await logOf(s).catch(() => '')).includes('line 5\n'));
    before.close();
    const shipped = Buffer.byteLength(await logOf(s));
    // A worker that restarts makes a runtime afresh and finds the container by its labels.
    const again = new DockerRuntime({ docker, workerName: 'w-docker-test', gpuDevices: 'none' });
    const out: string[] = [];
    const attached = await again.attach(s, 0, shipped, (_s, c) => out.push(c.toString()));
    expect(attached).not.toBeNull();
    expect(await attached!.exited).toEqual({ kind: 'exited', exitCode: 7 });
    const all = await logOf(s);
    expect(all.split('\n').filter(Boolean)).toEqual(
      Array.from({ length: 30 }, (_, i) => `line ${i}`),
    );
    expect(Buffer.byteLength(all) - shipped).toBe(Buffer.byteLength(out.join('')));
    expect(await again.attach(spec('true'), 0, 0, () => undefined)).toBeNull();
  });

  it('removes the containers of attempts no run of the worker owns', async () => {
    const kept = spec('sleep 30');
    const gone = spec('sleep 30');
    const runs = [
      await runtime.start(kept, () => undefined),
      await runtime.start(gone, () => undefined),
    ];
    const removed = await runtime.sweep(new Set([kept.attemptId]));
    expect(removed).toContain(gone.attemptId);
    expect(removed).not.toContain(kept.attemptId);
    expect((await runs[1]!.exited).kind).not.toBe('exited');
    await runs[0]!.kill(1_000);
  });
});
