import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer, WORKER_PERMISSIONS, type ChildServer } from '@trainyard/platform';
import { tempDir, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { startWorkerProcess, type ServiceProcess } from './processes.ts';

const CONTROL = 'control-pass-0123456789';
const WORKER = 'worker-pass-9876543210';
let dir: Awaited<ReturnType<typeof tempDir>>;
let nats: ChildServer;
let t: TestStack;
let worker: ServiceProcess;

const withLogin = (url: string, user: string, pass: string) =>
  url.replace('nats://', `nats://${user}:${pass}@`);

beforeAll(async () => {
  dir = await tempDir('trainyard-nats-auth-');
  nats = await startNatsServer({
    dir: join(dir.path, 'nats'),
    users: [
      { user: 'control', password: CONTROL },
      { user: 'worker', password: WORKER, permissions: WORKER_PERMISSIONS },
    ],
  });
  t = await startTestStack({
    natsUrl: withLogin(nats.url, 'control', CONTROL),
    localWorker: false,
  });
  worker = startWorkerProcess('remote', {
    natsUrl: withLogin(nats.url, 'worker', WORKER),
    sandboxRoot: join(dir.path, 'sandboxes'),
  });
});

afterAll(async () => {
  await worker?.stop();
  await t?.stop();
  await nats?.stop();
  await dir?.remove();
});

async function login(user?: string, pass?: string) {
  return connect({ servers: nats.url, reconnect: false, ...(user && { user, pass }) });
}

describe('a NATS that requires a login', () => {
  it('refuses a connection without one, or with a wrong password', async () => {
    await expect(login()).rejects.toThrow(/authorization/i);
    await expect(login('worker', 'guess')).rejects.toThrow(/authorization/i);
  });

  it('runs a job on a worker that has only the worker’s permissions, with nothing refused', async () => {
    const token = await t.token();
    const code = await codeArchive({
      'train.sh': 'echo training; echo 42 > "$TRAINYARD_OUTPUT_DIR/result.txt"\n',
    });
    const res = await submit(
      t,
      token,
      { name: 'remote', command: 'sh train.sh', resources: { gpus: 0 }, setup: 'true' },
      code,
    );
    const { id } = (await res.json()) as { id: string };
    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(job.attempts[0]!.workerId).toBe('remote');
    expect(await (await t.http(`/v1/jobs/${id}/logs`, { token })).text()).toContain('training');
    const outputs = (await (await t.http(`/v1/jobs/${id}/outputs`, { token })).json()) as {
      path: string;
    }[];
    expect(outputs.map((o) => o.path)).toEqual(['result.txt']);
    const log = readFileSync(join(dir.path, 'nats', 'nats-server.log'), 'utf8');
    expect(log).not.toMatch(/Violation/);
  });

  it('does not let a worker read the secrets, manage streams or dispatch work', async () => {
    const nc = await login('worker', WORKER);
    try {
      const js = jetstream(nc, { timeout: 2_000 });
      const jsm = await jetstreamManager(nc, { timeout: 2_000 });
      for (const bucket of ['ty_credentials', 'ty_config', 'ty_sessions', 'ty_revocations']) {
        const kv = await new Kvm(js).open(bucket).catch((err: Error) => err);
        if (kv instanceof Error) {
          expect(kv.message, bucket).toMatch(/permission|timeout|not found/i);
          continue;
        }
        await expect(kv.get('admin'), bucket).rejects.toThrow();
      }
      await expect(jsm.streams.delete('TY_EVENTS')).rejects.toThrow();
      await expect(jsm.streams.purge('TY_EVENTS')).rejects.toThrow();
      await expect(jsm.streams.add({ name: 'MINE', subjects: ['mine.>'] })).rejects.toThrow();
      nc.publish('ty.dispatch.remote.cpu', 'a forged dispatch');
      await nc.flush();
      await waitFor('the server to log the refusal', () =>
        /Publish Violation - User \\?"worker\\?", Subject \\?"ty\.dispatch\.remote\.cpu/.test(
          readFileSync(join(dir.path, 'nats', 'nats-server.log'), 'utf8'),
        ),
      );
    } finally {
      await nc.close();
    }
  });
});
