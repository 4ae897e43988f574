import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '@trainyard/servers';
import { tempDir, waitFor } from '@trainyard/testkit';
import { addUser, startTestStack, submit, type TestStack } from './harness.ts';
import { BIN, cliEnv, runCli } from './processes.ts';

/**
 * Services (`kind: "service"`) through the whole stack: ports, health checks, restarts, the
 * gateway's forwards with `trainyard service open` and the system `ssh`, templates.
 */
let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;
let token: string;

interface Job {
  id: string;
  status: string;
  kind: string;
  failure: { reason: string; message: string } | null;
  attempts?: {
    number: number;
    status: string;
    ports?: number[];
    failure: { reason: string; message: string } | null;
  }[];
}

const env = () => ({ ...cliEnv(t.url, token, work.path), HOME: join(work.path, 'home') });
const cli = (args: string[]) => runCli(args, { env: env(), timeoutMs: 30_000 });
const job = async (id: string) => (await (await t.http(`/v1/jobs/${id}`, { token })).json()) as Job;

async function submitService(spec: Record<string, unknown>): Promise<string> {
  const res = await submit(t, token, { resources: { gpus: 0 }, kind: 'service', ...spec });
  expect(res.status).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

async function stopService(id: string): Promise<void> {
  const stopped = await cli(['service', 'stop', id]);
  expect(stopped.code).toBe(0);
  await t.waitForJob(id, token, (j) => j.status === 'cancelled', 30_000);
}

beforeAll(async () => {
  t = await startTestStack({ checkEveryMs: 200 });
  work = await tempDir('trainyard-services-');
  token = await addUser(t, await t.token(), 'sam', 'orchard-pebble-lantern-8');
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('a service', () => {
  it('runs on a port of its own, is reached with `service open` through the gateway, and stops when told', async () => {
    const id = await submitService({
      name: 'web',
      command:
        'echo "hello from $TRAINYARD_JOB_ID on $PORT" > index.html; exec python3 -m http.server "$TRAINYARD_PORT" --bind 127.0.0.1',
      health: { http: '/index.html', intervalS: 2, timeoutS: 2, failures: 2, graceS: 30 },
    });
    await t.waitForJob(id, token, (j) => j.status === 'running', 30_000);
    const running = await job(id);
    expect(running.kind).toBe('service');
    const [port] = running.attempts!.at(-1)!.ports!;
    expect(port).toBeGreaterThanOrEqual(30_500);
    expect(port).toBeLessThan(31_500);

    const status = await cli(['status', id]);
    expect(status.stdout).toContain(
      `service (runs until stopped; health GET /index.html), on port ${port}`,
    );
    const listed = await cli(['service', 'ls']);
    expect(listed.stdout).toContain(id);

    const local = await freePort();
    const open = spawn(process.execPath, [BIN, 'service', 'open', id, '--local', String(local)], {
      env: env(),
      detached: true,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let said = '';
    open.stderr!.on('data', (c: Buffer) => (said += c.toString()));
    const exited = new Promise<number | null>((resolve) => open.once('exit', resolve));
    try {
      const page = await waitFor(
        'the service, through the forward',
        async () => {
          const res = await fetch(`http://127.0.0.1:${local}/index.html`).catch(() => null);
          return res?.ok ? res.text() : undefined;
        },
        { timeoutMs: 30_000 },
      );
      expect(page.trim()).toBe(`hello from ${id} on ${port}`);
      expect(said).toContain(`http://127.0.0.1:${local} reaches service ${id}`);
      // Stopping the service ends the forward: `service open` says so and exits.
      await stopService(id);
      expect(await exited).toBe(1);
      expect(said).toContain(`service ${id} is cancelled: the forward ends`);
    } finally {
      if (open.exitCode === null) process.kill(-open.pid!, 'SIGTERM');
    }

    const ended = await job(id);
    expect(ended.attempts).toHaveLength(1);
    expect((await cli(['service', 'open', id])).stderr).toContain(
      `service ${id} is cancelled, not running`,
    );
  });

  it('is started again when its health check fails, or when its command exits, and fails when it keeps ending at once', async () => {
    const id = await submitService({
      name: 'flaky',
      command: 'touch alive; sleep 5; rm alive; exec sleep 600',
      health: { command: 'test -e alive', intervalS: 2, timeoutS: 5, failures: 2, graceS: 0 },
    });
    const again = await t.waitForJob(
      id,
      token,
      (j) => (j.attemptCount ?? 0) >= 2 && j.status === 'running',
      60_000,
    );
    // Running again, it shows no failure: the last end is its attempt's.
    expect(again.failure).toBeNull();
    const first = (await job(id)).attempts![0]!;
    expect(first.failure?.reason).toBe('unhealthy');
    expect(first.failure?.message).toContain(
      'its health check (`test -e alive`) failed 2 times in a row: exit code 1',
    );
    await stopService(id);
    const stopped = await job(id);
    expect(stopped.failure).toBeNull();
    expect((await cli(['status', id])).stdout.split('\n')[0]).toBe(`${id}  flaky  cancelled`);

    const quits = await submitService({ name: 'quits', command: 'exit 0', maxRetries: 1 });
    const failed = await t.waitForJob(quits, token, (j) => j.status === 'failed', 60_000);
    expect(failed.attemptCount).toBe(2);
    const ended = await job(quits);
    expect(ended.attempts![0]!.failure?.reason).toBe('serviceExited');
    expect(ended.failure?.message).toMatch(
      /ended 2 times in a row before it had run 10 minutes .*: not started again/,
    );

    // Never healthy, however long its grace: each such end is a quick one.
    const never = await submitService({
      name: 'never',
      command: 'exec sleep 600',
      maxRetries: 0,
      health: { http: '/', intervalS: 2, timeoutS: 2, failures: 1, graceS: 0 },
    });
    const gaveUp = await t.waitForJob(never, token, (j) => j.status === 'failed', 60_000);
    expect(gaveUp.attemptCount).toBe(1);
    expect(gaveUp.failure?.reason).toBe('neverHealthy');
    expect(gaveUp.failure?.message).toContain('its health check (GET / on port');
  });

  it('is refused where its spec cannot be one', async () => {
    const refusals: [Record<string, unknown>, RegExp][] = [
      [{ kind: 'service', shards: 2 }, /shards: a service runs alone/],
      [{ ports: 2 }, /ports: only a service/],
      [{ health: { http: '/' } }, /health: only a service/],
      [{ kind: 'service', health: { http: '/', command: 'true' } }, /`http` path or a `command`/],
      [{ kind: 'service', ports: 9 }, /ports/],
      [{ kind: 'service', health: { http: '/', intervalS: 1 } }, /intervalS/],
      [{ kind: 'service', health: { command: 'false\u0000' } }, /health.command: holds a NUL/],
      [{ command: 'echo a\u0000b' }, /command: holds a NUL/],
      [{ kind: 'service', health: { http: 'no-slash' } }, /a path such as \/health/],
    ];
    for (const [extra, message] of refusals) {
      const res = await submit(t, token, {
        name: 'bad',
        command: 'true',
        resources: { gpus: 0 },
        ...extra,
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(message);
    }
  });
});

describe('service templates', () => {
  it('make specs the API takes, and say what they need', async () => {
    for (const args of [
      ['jupyter', '--host'],
      // The test cluster has no GPUs: one the inference server would hold is refused there.
      ['inference', '--host', '--gpus', '0', '--model', 'Qwen/Qwen2.5-0.5B-Instruct'],
    ]) {
      const made = await cli(['service', 'create', ...args, '--dry-run']);
      expect(made.code).toBe(0);
      const spec = JSON.parse(made.stdout) as Record<string, unknown>;
      expect(spec).toMatchObject({ kind: 'service', health: { http: expect.any(String) } });
      const checked = await t.http('/v1/jobs?dryRun=true', {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(spec),
      });
      expect(checked.status, await checked.clone().text()).toBe(200);
    }
    const noModel = await cli(['service', 'create', 'inference', '--dry-run']);
    expect(noModel.code).not.toBe(0);
    expect(noModel.stderr).toContain('--model');
    const nowhere = await cli([
      'service',
      'create',
      'jupyter',
      join(work.path, 'nowhere'),
      '--dry-run',
    ]);
    expect(nowhere.stderr).toContain('nowhere is not a directory');
    const unknown = await cli(['service', 'create', 'tensorboard', '--dry-run']);
    expect(unknown.stderr).toContain(
      'no service template "tensorboard": there are jupyter, inference',
    );
  });
});
