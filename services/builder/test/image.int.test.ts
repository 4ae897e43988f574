import { createHash, randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, testDocker, waitFor, writeWheel } from '@trainyard/testkit';
import { DEFAULT_BASE_IMAGE } from '@trainyard/runtime';
import { dockerfileText } from '../src/dockerfile.ts';
import {
  buildImage,
  type ImageBuildConfig,
  type ImageBuildInput,
  type ImageBuildOutcome,
} from '../src/image.ts';
import { pruneImages } from '../src/prune.ts';

const BASE = DEFAULT_BASE_IMAGE;
/** Keeps this run's cache keys apart from any earlier run's on the same engine. */
const RUN = randomBytes(4).toString('hex');

let docker: Docker;
let registry: string;
let root: Awaited<ReturnType<typeof tempDir>>;
let cfg: ImageBuildConfig;
let jobs = 0;

/**
 * A job whose code is `files` (paths under its root); its code sha256 follows the files, as an
 * archive's would.
 */
async function job(files: Record<string, string>, setup?: string): Promise<ImageBuildInput> {
  const jobId = `job-${RUN}-${++jobs}`;
  const srcDir = join(root.path, jobId);
  await mkdir(srcDir);
  for (const [name, text] of Object.entries(files)) {
    await mkdir(dirname(join(srcDir, name)), { recursive: true });
    await writeFile(join(srcDir, name), text);
  }
  const codeSha256 = createHash('sha256')
    .update(JSON.stringify([RUN, files]))
    .digest('hex');
  return { tag: jobId, baseImage: BASE, localBase: true, srcDir, setup, codeSha256 };
}

/** Builds, keeping every line `out` got with the time it came. */
async function build(input: ImageBuildInput, config = cfg) {
  const lines: { at: number; line: string }[] = [];
  const outcome = await buildImage(config, input, (line) => lines.push({ at: Date.now(), line }));
  return { outcome, lines, text: lines.map((l) => l.line) };
}

function built(outcome: ImageBuildOutcome) {
  if (!outcome.ok) throw new Error(`the build failed: ${outcome.failure.message}`);
  return outcome;
}

/**
 * Runs `cmd` in the image as an unprivileged uid with no network; its exit code and output. The
 * output must not be JSON alone: the client parses a body that is, whatever its content type.
 */
async function runIn(image: string, cmd: string[]): Promise<{ code: number; output: string }> {
  const container = await docker.createContainer({
    Image: image,
    Cmd: cmd,
    User: '1000:1000',
    Tty: true,
    HostConfig: { NetworkMode: 'none' },
  });
  try {
    await container.start();
    const { StatusCode } = (await container.wait()) as { StatusCode: number };
    const logs = await container.logs({ stdout: true, stderr: true });
    return { code: StatusCode, output: logs.toString() };
  } finally {
    await container.remove({ force: true });
  }
}

let first: { input: ImageBuildInput; digest: string; id: string };

beforeAll(async () => {
  ({ docker, registry } = testDocker());
  root = await tempDir('trainyard-image-test-');
  const wheels = join(root.path, 'wheels');
  await mkdir(wheels);
  await writeWheel(wheels, 'hello_ty', 'hello from the wheel');
  cfg = { docker, registry, pipFindLinks: wheels };
});

afterAll(async () => {
  await root?.remove();
});

describe('buildImage', () => {
  it('builds code, requirements and setup into an image pushed by digest, streaming its output', async () => {
    const input = await job(
      {
        'requirements.txt': 'hello_ty==1.0\n',
        'train.py': [
          'import hello_ty',
          'print(hello_ty.GREETING)',
          'open("written-by-the-job.txt", "w").write("ok")',
          'print(open("made-by-setup.txt").read().strip())',
        ].join('\n'),
      },
      'echo setup started as $(id -u); sleep 1; echo made by setup > made-by-setup.txt; echo setup done',
    );
    const { outcome, lines, text } = await build(input);
    const { image, cached } = built(outcome);
    expect(cached).toBe(false);
    expect(image.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(image.ref).toBe(`${registry}/trainyard/jobs@${image.digest}`);
    expect(text.some((l) => /^Successfully installed hello[-_]ty-1\.0$/.test(l))).toBe(true);
    // Streamed as the build ran, not handed over at its end: setup's second line came a
    // second after its first.
    const at = (l: string) => lines.find((x) => x.line === l)!.at;
    // What the job brought ran as a uid that is not root.
    expect(at('setup done') - at('setup started as 65534')).toBeGreaterThanOrEqual(800);

    const manifest = await fetch(`http://${registry}/v2/trainyard/jobs/manifests/${image.digest}`, {
      headers: { Accept: 'application/vnd.docker.distribution.manifest.v2+json' },
    });
    expect(manifest.status).toBe(200);

    const info = await docker.getImage(image.ref).inspect();
    expect(info.Config.Labels).toMatchObject({
      'trainyard.build': '1',
      'trainyard.job': input.tag,
      'trainyard.cache-key': expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    const ran = await runIn(image.ref, [
      'sh',
      '-c',
      'python3 train.py && test ! -e /trainyard/build && cat written-by-the-job.txt',
    ]);
    expect(ran.output).toContain('hello from the wheel');
    expect(ran.output).toContain('made by setup');
    expect(ran.output.trim().endsWith('ok')).toBe(true);
    expect(ran.code).toBe(0);
    first = { input, digest: image.digest, id: info.Id };
  }, 60_000);

  it('reuses the image built before from the same inputs, without building', async () => {
    const again = { ...first.input, tag: `job-${RUN}-again` };
    const { outcome, text } = await build(again);
    const { image, cached } = built(outcome);
    expect(cached).toBe(true);
    expect(image.digest).toBe(first.digest);
    expect(text.some((l) => /reusing the image/.test(l))).toBe(true);
    expect(text.some((l) => /^Step \d+/.test(l))).toBe(false);
    const tagged = await docker.getImage(`${registry}/trainyard/jobs:${again.tag}`).inspect();
    expect(tagged.Id).toBe(first.id);
  });

  it('fails as the job’s fault, naming a requirement pip cannot find', async () => {
    const input = await job({ 'requirements.txt': 'hello_ty==1.0\nno-such-package==9.9\n' });
    const { outcome } = await build(input);
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.failure).toMatchObject({
      reason: 'buildFailed',
      kind: 'user',
      retryable: false,
    });
    expect(outcome.failure.message).toContain(
      'No matching distribution found for no-such-package==9.9',
    );
  });

  it('fails as the job’s fault when setup fails, quoting what it said', async () => {
    const input = await job({}, 'echo fetching the dataset; echo the dataset is gone >&2; exit 3');
    const { outcome } = await build(input);
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.failure.reason).toBe('buildFailed');
    expect(outcome.failure.message).toContain('code 3');
    expect(outcome.failure.message).toContain('the dataset is gone');
  });

  it('never lets file names or setup become Dockerfile instructions', async () => {
    const odd = ['$(touch /pwned)', 'quote"and\'apostrophe', 'new\nline\nRUN touch /pwned'];
    const input = await job(
      Object.fromEntries(odd.map((name) => [name, 'x'])),
      'echo set up\nRUN touch /x\n"; touch /y; "\ntrue',
    );
    const dockerfile = dockerfileText();
    for (const text of [...odd, 'touch', input.tag, BASE]) {
      expect(dockerfile).not.toContain(text);
    }
    const { outcome } = await build(input);
    const { image } = built(outcome);
    const history = (await docker.getImage(image.ref).history()) as { CreatedBy: string }[];
    for (const layer of history) expect(layer.CreatedBy).not.toMatch(/touch|pwned/);
    const listing = [
      'import json, os',
      'files = [os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs]',
      'print("seen:", json.dumps([sorted(files), [os.path.exists(p) for p in ("/pwned", "/x", "/y")]]))',
    ].join('\n');
    const ran = await runIn(image.ref, ['python3', '-c', listing]);
    const [files, exists] = JSON.parse(ran.output.replace(/^[^]*seen: /, '')) as [
      string[],
      boolean[],
    ];
    expect(files).toEqual([...odd].sort());
    expect(exists).toEqual([false, false, false]);
  });

  it('stops the build when its signal aborts, leaving no container behind', async () => {
    const input = await job({}, 'echo waiting; sleep 60');
    const abort = new AbortController();
    const building = buildImage(
      cfg,
      input,
      (line) => {
        if (line === 'waiting') abort.abort(new Error('the job was cancelled'));
      },
      abort.signal,
    );
    await expect(building).rejects.toThrow('the job was cancelled');
    await waitFor('the build container to go', async () => {
      const containers = await docker.listContainers({ all: true });
      return containers.length === 0;
    });
  });

  it('fails as the job’s fault when the base image cannot be pulled, naming it', async () => {
    const input = { ...(await job({})), baseImage: 'nosuch/image:1', localBase: false };
    const { outcome } = await build(input);
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.failure.reason).toBe('buildFailed');
    expect(outcome.failure.message).toContain('nosuch/image:1');
  });

  it('never builds on another job’s image, nor on anything the engine holds by a name it was not pulled by', async () => {
    // The first test's job, in Trainyard's registry and on this engine.
    const other = `${registry}/trainyard/jobs@${first.digest}`;
    for (const baseImage of [other, 'trainyard/cache:abc', first.id.slice(7, 19), BASE]) {
      const { outcome, text } = await build({
        ...(await job({}, 'tar cf - /workspace | head -c 100')),
        baseImage,
        localBase: false,
      });
      expect(outcome.ok, baseImage).toBe(false);
      if (outcome.ok) return;
      expect(outcome.failure.reason).toBe('buildFailed');
      expect(text.join('\n')).not.toContain('Step 1/');
    }
  });

  it('fails as the platform’s fault when the registry is unreachable, never showing the password', async () => {
    const password = `pw-${randomBytes(8).toString('hex')}`;
    const { outcome, text } = await build(
      { ...first.input, tag: `job-${RUN}-noregistry` },
      { ...cfg, registry: '127.0.0.1:1', auth: { username: 'trainyard', password } },
    );
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.failure).toMatchObject({ reason: 'buildInfrastructure', retryable: true });
    expect(outcome.failure.message).toContain('127.0.0.1:1');
    expect(outcome.failure.message).not.toContain(password);
    for (const line of text) expect(line).not.toContain(password);
  });

  it('fails as the platform’s fault when the Docker engine cannot be reached', async () => {
    const gone = new Docker({ socketPath: join(root.path, 'no-engine.sock') });
    const { outcome } = await build(first.input, { ...cfg, docker: gone });
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.failure.reason).toBe('buildInfrastructure');
    expect(outcome.failure.message).toContain('cannot be reached');
  });
});

describe('pruneImages', () => {
  it('removes old images and the oldest over the size limit, but none a container uses', async () => {
    const labelled = async () =>
      (await docker.listImages({ filters: { label: ['trainyard.build=1'] } })).map((i) => i.Id);
    const before = await labelled();
    expect(before).toContain(first.id);
    expect(before.length).toBeGreaterThanOrEqual(2);

    const holder = await docker.createContainer({ Image: first.id, Cmd: ['true'] });
    try {
      const bySize = await pruneImages(docker, { maxAgeMs: 3_600_000, maxTotalBytes: 0 });
      expect(bySize.removed.sort()).toEqual(before.filter((id) => id !== first.id).sort());
      expect(await labelled()).toEqual([first.id]);
    } finally {
      await holder.remove({ force: true });
    }

    const later = new Date(Date.now() + 60_000);
    const byAge = await pruneImages(docker, {
      maxAgeMs: 1_000,
      maxTotalBytes: Number.MAX_SAFE_INTEGER,
      now: later,
    });
    expect(byAge.removed).toEqual([first.id]);
    expect(await labelled()).toEqual([]);
  });
});
