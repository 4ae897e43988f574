import { spawn } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Labels, LOCAL_BASES, SimulatedInventory } from '@trainyard/runtime';
import { freePort } from '@trainyard/servers';
import { runInImage, tempDir, testDocker, waitFor, writeWheel } from '@trainyard/testkit';
import {
  addUser,
  codeArchive,
  startTestStack,
  submit,
  type Job,
  type TestStack,
} from './harness.ts';
import { BIN, runCli } from './processes.ts';
import { connect, runningSession, SshClient, waitForSession } from './ssh.ts';

/**
 * The container path from outside: a job with an image and a requirements file is built into
 * an image (its requirements from a wheel directory, as no index is reachable), pushed to the
 * registry, pulled by digest and run in a container by a worker of the Docker runtime.
 */
const docker = testDocker();
let t: TestStack;
let token: string;
let wheels: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  wheels = await tempDir('trainyard-wheels-');
  await writeWheel(wheels.path, 'tygreet', 'hello from a wheel');
  process.env.TRAINYARD_PIP_FIND_LINKS = wheels.path;
  t = await startTestStack({ containers: docker, inventory: SimulatedInventory.parse('1x16GiB') });
  token = await t.token();
});

afterAll(async () => {
  delete process.env.TRAINYARD_PIP_FIND_LINKS;
  await t?.stop();
  await wheels?.remove();
});

const TRAIN = [
  'import os, tygreet',
  'print(tygreet.GREETING, "uid", os.getuid(), flush=True)',
  'out = os.environ["TRAINYARD_OUTPUT_DIR"]',
  'open(os.path.join(out, "model.txt"), "w").write("weights")',
  'open(os.environ["TRAINYARD_METRICS_FILE"], "a").write(\'{"step": 1, "loss": 0.25}\\n\')',
].join('\n');

const spec = (over: object = {}) => ({
  name: 'boxed',
  command: 'python3 train.py',
  image: 'python',
  resources: { gpus: 0 },
  maxRetries: 0,
  ...over,
});

async function submitted(res: Response): Promise<string> {
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

const logsOf = async (id: string, attempt?: number) =>
  (
    await t.http(`/v1/jobs/${id}/logs${attempt === undefined ? '' : `?attempt=${attempt}`}`, {
      token,
    })
  ).text();

/** Runs `command` through the gateway in a session (or beside a job), logged in by password. */
async function sshIn(id: string, command: string, kind: 'sessions' | 'jobs' = 'sessions') {
  const work = await tempDir('trainyard-ssh-');
  try {
    const info = await connect(t, token, id, kind);
    const shell = await SshClient.forSession(work.path, info);
    return await shell.ssh(command, { password: info.password });
  } finally {
    await work.remove();
  }
}

/** Asks for a session with code, as multipart. */
async function askWithCode(spec: object, files: Record<string, string>, tok = token) {
  const form = new FormData();
  form.set('spec', JSON.stringify(spec));
  form.set('code', new Blob([new Uint8Array(await codeArchive(files))]), 'code.tar.gz');
  return t.http('/v1/sessions', { method: 'POST', token: tok, body: form });
}

const EXAMPLES = resolve(fileURLToPath(new URL('../../../examples', import.meta.url)));

describe('jobs in containers', () => {
  it('trains the digits example on the pytorch base made from this host, probed first in its image', async () => {
    const train = await readFile(join(EXAMPLES, 'digits-mlp', 'train.py'), 'utf8');
    const code = await codeArchive({ 'train.py': train });
    const id = await submitted(
      await submit(
        t,
        token,
        spec({ name: 'digits', image: 'pytorch', resources: { gpus: 1 }, env: { EPOCHS: '2' } }),
        code,
      ),
    );
    const job: Job = await t.waitForJob(
      id,
      token,
      (j) => j.status === 'succeeded' || j.status === 'failed',
      240_000,
    );
    expect(job.failure).toBeNull();
    expect(job.imageDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(await logsOf(id, 0)).toContain(`local base image ${LOCAL_BASES.pytorch.ref}`);
    expect(job.attempts.map((a) => [a.probe, a.status])).toEqual([
      [true, 'succeeded'],
      [false, 'succeeded'],
    ]);
    expect(job.estimate).toMatchObject({ device: 'cpu', vramBytes: 0 });
    expect(job.estimate!.steps).toBeGreaterThanOrEqual(3);
    expect(job.estimate!.ramBytes).toBeGreaterThan(50 * 1024 ** 2);
    expect(await logsOf(id, 2)).toContain('done: accuracy');
    const metrics = await t.http(`/v1/jobs/${id}/outputs/metrics.jsonl`, { token });
    expect(
      (await metrics.text())
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { epoch: number }).epoch),
    ).toEqual([1, 2]);
    // Each library is in the base once, where a link of torch's and `ldd` name it alike.
    const copies = await runInImage(
      docker.docker,
      LOCAL_BASES.pytorch.ref,
      'find / -xdev -name "libtorch_cpu.so*" -type f',
    );
    expect(copies.output.trim().split('\n'), copies.output).toHaveLength(1);
  }, 300_000);

  it('builds the job’s image with its requirements, pushes it, and runs it in a container that is not root', async () => {
    const code = await codeArchive({ 'train.py': TRAIN, 'requirements.txt': 'tygreet\n' });
    const id = await submitted(await submit(t, token, spec(), code));
    const job: Job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
    expect(job.image).toBe('python');
    expect(job.imageDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const build = await logsOf(id, 0);
    expect(build).toContain('building the job’s image');
    expect(build).toMatch(/Successfully installed tygreet/);
    const run = await logsOf(id);
    expect(run).toMatch(/hello from a wheel uid \d+/);
    expect(run).not.toMatch(/uid 0\b/);
    const files = (await (await t.http(`/v1/jobs/${id}/outputs`, { token })).json()) as {
      path: string;
    }[];
    expect(files.map((f) => f.path)).toEqual(['model.txt']);
    // It wrote its metrics file as the container's own user, and the worker read it.
    await waitFor('its metrics', async () => {
      const m = (await (await t.http(`/v1/jobs/${id}/metrics`, { token })).json()) as {
        summary: { name: string; last: number }[];
      };
      return m.summary[0]?.name === 'loss' && m.summary[0].last === 0.25;
    });
    const manifest = await fetch(
      `http://${docker.registry}/v2/trainyard/jobs/manifests/${job.imageDigest}`,
      { headers: { accept: 'application/vnd.docker.distribution.manifest.v2+json' } },
    );
    expect(manifest.status).toBe(200);
    const left = await docker.docker.listContainers({
      all: true,
      filters: { label: [`${Labels.job}=${id}`] },
    });
    expect(left).toEqual([]);
  });

  it('fails a job whose requirement cannot be had, naming it, without running it', async () => {
    const code = await codeArchive({ 'train.py': TRAIN, 'requirements.txt': 'nosuchpkg==9.9\n' });
    const id = await submitted(await submit(t, token, spec(), code));
    const job = await t.waitForJob(id, token, (j) => j.status === 'failed', 60_000);
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'buildFailed' });
    expect(job.failure?.message).toContain('nosuchpkg');
    expect(job.attempts).toEqual([]);
  });

  it('fails a job that outgrows its memory limit as out of memory', async () => {
    const code = await codeArchive({
      'train.py': 'x = bytearray(512 * 1024 * 1024)\nprint(len(x))\n',
    });
    const id = await submitted(
      await submit(t, token, spec({ resources: { gpus: 0, memoryGb: 0.0625 } }), code),
    );
    const job = await t.waitForJob(id, token, (j) => j.status === 'failed', 60_000);
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'oomKilled' });
  });

  it('opens a shell beside a job in its container; cancelling it stops and removes the container', async () => {
    const code = await codeArchive({
      'train.py': 'import time\nprint("training", flush=True)\ntime.sleep(300)\n',
    });
    const id = await submitted(await submit(t, token, spec(), code));
    await t.waitForJob(id, token, (j) => j.status === 'running', 60_000);
    const ran = await sshIn(id, 'id -u; pwd; echo "$TRAINYARD_JOB_ID"; ls', 'jobs');
    expect(ran.code, ran.stderr).toBe(0);
    const [uid, dir, jobId, ...files] = ran.stdout.trim().split('\n');
    expect(Number(uid)).toBeGreaterThan(0);
    expect(dir).toBe('/workspace');
    expect(jobId).toBe(id);
    expect(files).toContain('train.py');
    const res = await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token });
    expect(res.status).toBeLessThan(300);
    await t.waitForJob(id, token, (j) => j.status === 'cancelled', 30_000);
    // The worker reports the end first, then removes the container.
    const left = () =>
      docker.docker.listContainers({ all: true, filters: { label: [`${Labels.job}=${id}`] } });
    await waitFor('the container to be removed', async () => (await left()).length === 0, {
      timeoutMs: 15_000,
    });
    expect(await left()).toEqual([]);
  });

  it('runs a service in its container: its health checked in there, its port reached through the gateway', async () => {
    const served = await submitted(
      await submit(
        t,
        token,
        spec({
          name: 'served',
          kind: 'service',
          command:
            'echo "from the box" > index.html; exec python3 -m http.server "$TRAINYARD_PORT" --bind 127.0.0.1',
          health: { http: '/index.html', intervalS: 2, timeoutS: 2, failures: 2, graceS: 60 },
        }),
      ),
    );
    const sick = await submitted(
      await submit(
        t,
        token,
        spec({
          name: 'sick',
          kind: 'service',
          command: 'exec python3 -m http.server "$TRAINYARD_PORT" --bind 127.0.0.1',
          health: { http: '/missing', intervalS: 2, timeoutS: 2, failures: 1, graceS: 0 },
        }),
      ),
    );
    const failed = await t.waitForJob(sick, token, (j) => j.status === 'failed', 120_000);
    expect(failed.failure?.reason).toBe('neverHealthy');
    expect(failed.failure?.message).toContain('failed 1 times in a row: HTTP 404');

    await t.waitForJob(served, token, (j) => j.status === 'running', 120_000);
    const work = await tempDir('trainyard-open-');
    const local = await freePort();
    const open = spawn(
      process.execPath,
      [BIN, 'service', 'open', served, '--local', String(local)],
      {
        env: {
          ...process.env,
          HOME: work.path,
          TRAINYARD_API_URL: t.url,
          TRAINYARD_TOKEN: token,
          XDG_CONFIG_HOME: join(work.path, 'config'),
          XDG_STATE_HOME: join(work.path, 'state'),
        },
        detached: true,
        stdio: 'ignore',
      },
    );
    try {
      const page = await waitFor(
        'the service in its container, through the forward',
        async () => {
          const res = await fetch(`http://127.0.0.1:${local}/index.html`).catch(() => null);
          return res?.ok ? res.text() : undefined;
        },
        { timeoutMs: 30_000 },
      );
      expect(page).toBe('from the box\n');
    } finally {
      process.kill(-open.pid!, 'SIGTERM');
      await work.remove();
    }
    // Healthy all along: still its first attempt.
    const running = await t.waitForJob(served, token, (j) => j.status === 'running');
    expect(running.attempts).toHaveLength(1);
    await t.http(`/v1/jobs/${served}/cancel`, { method: 'POST', token });
    await t.waitForJob(served, token, (j) => j.status === 'cancelled', 30_000);
  }, 240_000);

  it('abandons the image build of a job cancelled while it builds: the engine’s build stops too', async () => {
    const code = await codeArchive({ 'train.py': 'print("never")\n' });
    const id = await submitted(
      await submit(t, token, spec({ name: 'long-setup', setup: 'sleep 600' }), code),
    );
    // The build's step that runs the setup: a container of the engine's, while it lasts.
    const building = async () =>
      (await docker.docker.listContainers()).some((c) => c.Command.includes('setup.sh'));
    await waitFor('the image build to run the setup', building, { timeoutMs: 120_000 });
    const res = await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token });
    expect(res.status).toBeLessThan(300);
    const job = await t.waitForJob(id, token, (j) => j.status === 'cancelled', 30_000);
    expect(job.attempts).toEqual([]);
    await waitFor('the engine’s build to stop', async () => !(await building()), {
      timeoutMs: 30_000,
    });
  }, 240_000);

  it('refuses another job’s image or Trainyard’s own as a base, and a memory limit no container starts in', async () => {
    for (const over of [
      { image: `${docker.registry}/trainyard/jobs:job_other` },
      { image: 'trainyard/cache:0123abcd' },
      { resources: { gpus: 0, memoryGb: 0.001 } },
    ]) {
      const res = await submit(t, token, spec(over));
      expect(res.status, JSON.stringify(over)).toBe(400);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
        'VALIDATION_FAILED',
      );
    }
  });

  it('runs a job that names no image in the default base where jobs run in containers', async () => {
    const id = await submitted(
      await t.http('/v1/jobs', {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          name: 'plain',
          command: 'python3 -c "import sys; print(sys.version_info.major)"',
          resources: { gpus: 0 },
          maxRetries: 0,
        }),
      }),
    );
    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
    expect(job.image).toBe('python');
    expect(await logsOf(id)).toContain('3\n');
  });
});

describe('sessions in containers', () => {
  const ask = (tok: string, body: object) =>
    t.http('/v1/sessions', {
      method: 'POST',
      token: tok,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('runs a session in a job’s image, with its code and requirements, limited and not root; stopping it removes the container', async () => {
    const code = await codeArchive({ 'train.py': TRAIN, 'requirements.txt': 'tygreet\n' });
    const jobId = await submitted(await submit(t, token, spec(), code));
    const job = await t.waitForJob(jobId, token, (j) => j.status === 'succeeded', 60_000);
    const session = await runningSession(t, token, {
      fromJob: jobId,
      resources: { gpus: 0, memoryGb: 0.5 },
    });
    expect(session).toMatchObject({ fromJob: jobId, imageDigest: job.imageDigest });
    const held = await docker.docker.listContainers({
      filters: { label: [`${Labels.session}=${session.id}`] },
    });
    expect(held).toHaveLength(1);
    expect(held[0]!.HostConfig.NetworkMode).toBe('none');
    const ran = await sshIn(
      session.id,
      'id -u; pwd; ls; python3 -c "import tygreet; print(tygreet.GREETING)"; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; echo "$TRAINYARD_SESSION_ID"; exit 7',
    );
    expect(ran.code, ran.stderr).toBe(7);
    const [uid, dir, ...rest] = ran.stdout.trim().split('\n');
    expect(Number(uid)).toBeGreaterThan(0);
    expect(dir).toBe('/workspace');
    expect(rest).toContain('train.py');
    expect(rest).toContain('hello from a wheel');
    expect(rest).toContain(String(512 * 1024 ** 2));
    expect(rest.at(-1)).toBe(session.id);
    const stop = await t.http(`/v1/sessions/${session.id}/stop`, { method: 'POST', token });
    expect(stop.status).toBeLessThan(300);
    await waitForSession(t, token, session.id, (s) => s.status === 'stopped', 30_000);
    const left = await docker.docker.listContainers({
      all: true,
      filters: { label: [`${Labels.session}=${session.id}`] },
    });
    expect(left).toEqual([]);
  });

  it('builds a session’s own image on the default base, with its code and requirements, then runs it', async () => {
    const res = await askWithCode(
      { resources: { gpus: 0 } },
      { 'notes.txt': 'mine\n', 'requirements.txt': 'tygreet\n' },
    );
    expect(res.status, await res.clone().text()).toBe(202);
    const created = (await res.json()) as { id: string; status: string };
    expect(created.status).toBe('building');
    const session = await waitForSession(
      t,
      token,
      created.id,
      (s) => s.status === 'running',
      90_000,
    );
    expect(session).toMatchObject({ image: 'python', fromJob: null });
    expect(session.imageDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const ran = await sshIn(
      session.id,
      'id -u; pwd; cat notes.txt; python3 -c "import tygreet; print(tygreet.GREETING)"',
    );
    expect(ran.code, ran.stderr).toBe(0);
    const [uid, dir, ...rest] = ran.stdout.trim().split('\n');
    expect(Number(uid)).toBeGreaterThan(0);
    expect(dir).toBe('/workspace');
    expect(rest).toEqual(['mine', 'hello from a wheel']);
    await t.http(`/v1/sessions/${session.id}/stop`, { method: 'POST', token });
    await waitForSession(t, token, session.id, (s) => s.status === 'stopped', 30_000);
  });

  it('fails a session whose requirement cannot be had, naming it; the CLI shows its build as it goes', async () => {
    const work = await tempDir('trainyard-session-cli-');
    try {
      const dir = join(work.path, 'code');
      await mkdir(dir);
      await writeFile(join(dir, 'requirements.txt'), 'nosuchpkg==9.9\n');
      const args = ['session', 'create', dir, '--image', 'python', '--gpus', '0'];
      const ran = await runCli([...args, '--follow-until-running'], {
        timeoutMs: 120_000,
        env: {
          ...process.env,
          TRAINYARD_API_URL: t.url,
          TRAINYARD_TOKEN: token,
          XDG_CONFIG_HOME: join(work.path, 'config'),
          XDG_STATE_HOME: join(work.path, 'state'),
          TRAINYARD_HOME: join(work.path, 'home'),
        },
      });
      expect(ran.code, ran.stderr).not.toBe(0);
      const id = ran.stdout.trim();
      expect(ran.stderr).toContain(`${id} building`);
      expect(ran.stderr).toContain('--- build ---');
      expect(ran.stderr).toContain('building the session’s image on');
      expect(ran.stderr).toMatch(/ended before it ran: failed: buildFailed: .*nosuchpkg/);
      const failed = await waitForSession(t, token, id, (s) => s.status === 'failed', 10_000);
      expect(failed.failure).toMatchObject({ kind: 'user', reason: 'buildFailed' });
      expect(failed.failure?.message).toContain('nosuchpkg');
      expect(failed.runs).toBe(0);
      const log = await (await t.http(`/v1/sessions/${id}/logs`, { token })).text();
      expect(log).toContain('building the session’s image on');
      expect(log).toContain('nosuchpkg');
      const followed = await t.http(`/v1/sessions/${id}/logs?follow=true`, { token });
      expect(await followed.text()).toBe(log);
    } finally {
      await work.remove();
    }
  });

  it('refuses a session from another user’s job, from a job and a base image both, from a job with code sent too, and another job’s image as a base', async () => {
    const jobId = await submitted(await submit(t, token, spec()));
    const bob = await addUser(t, token, 'bob', 'tall-river-stone-42');
    const cases: [string, object, string][] = [
      [bob, { fromJob: jobId, resources: { gpus: 0 } }, `job ${jobId} not found`],
      [token, { fromJob: jobId, image: 'python', resources: { gpus: 0 } }, 'not both'],
      [token, { resources: { gpus: 0, memoryGb: 0.001 } }, 'nothing starts in less'],
      [
        token,
        { image: `${docker.registry}/trainyard/jobs:${jobId}`, resources: { gpus: 0 } },
        'image:',
      ],
    ];
    for (const [tok, body, words] of cases) {
      const res = await ask(tok, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain(words);
    }
    const both = await askWithCode({ fromJob: jobId, resources: { gpus: 0 } }, { 'a.py': '' });
    expect(both.status).toBe(400);
    expect(await both.text()).toContain('send no code with it');
  });
});
