import { afterAll, beforeAll, expect, it } from 'vitest';
import { tempDir, waitFor } from '@trainyard/testkit';
import { startTestStack, type TestStack } from './harness.ts';
import { startWorkerProcess, type ServiceProcess } from './processes.ts';
import { connect, registeredKey, runningSession, SshClient, waitForSession } from './ssh.ts';

/** A session outlives its worker: it is placed again elsewhere, and its user told. */
let t: TestStack;
let token: string;
let dir: Awaited<ReturnType<typeof tempDir>>;
const workers: ServiceProcess[] = [];

function worker(name: string): ServiceProcess {
  const w = startWorkerProcess(name, {
    natsUrl: t.natsUrl,
    sandboxRoot: dir.path,
    heartbeatMs: 200,
  });
  workers.push(w);
  return w;
}

async function online(name: string) {
  await waitFor(`worker ${name} online`, async () => {
    const list = (await (await t.http('/v1/workers', { token })).json()) as {
      id: string;
      status: string;
    }[];
    return list.some((w) => w.id === name && w.status === 'online') ? true : undefined;
  });
}

beforeAll(async () => {
  t = await startTestStack({ localWorker: false, heartbeatTimeoutMs: 1_500 });
  token = await t.token();
  dir = await tempDir('trainyard-ssh-failover-');
});

afterAll(async () => {
  for (const w of workers) await w.stop();
  await t?.stop();
  await dir?.remove();
});

it('moves a session whose worker is lost, closing its connections with the reason', async () => {
  const first = worker('ssh-a');
  await online('ssh-a');
  const key = await registeredKey(t, token, dir.path, 'admin_key');
  const session = await runningSession(t, token);
  expect(session.workerId).toBe('ssh-a');
  const client = await SshClient.forSession(dir.path, await connect(t, token, session.id));
  expect((await client.ssh('echo kept > note.txt', { key })).code).toBe(0);

  const live = client.spawn([], key, 'sleep 300');
  let stderr = '';
  live.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const ended = new Promise<number | null>((r) => live.once('exit', (code) => r(code)));
  await waitFor('the sleep to run', async () =>
    (await client.ssh('pgrep -x sleep', { key })).code === 0 ? true : undefined,
  );

  worker('ssh-b');
  await online('ssh-b');
  await first.kill9();

  expect(await ended).not.toBe(0);
  expect(stderr).toContain('worker was lost');
  const moved = await waitForSession(
    t,
    token,
    session.id,
    (s) => s.status === 'running' && s.workerId === 'ssh-b',
    30_000,
  );
  expect(moved.workerId).toBe('ssh-b');
  const { events } = await t.stack.ctx.bus.store.load('session', session.id);
  expect(events.map((e) => e.type)).toContain('SessionRequeued');

  const again = await SshClient.forSession(dir.path, await connect(t, token, session.id));
  const look = await again.ssh('cat note.txt || echo gone', { key });
  expect(look.code).toBe(0);
  expect(look.stdout.trim()).toBe('gone');
}, 90_000);
