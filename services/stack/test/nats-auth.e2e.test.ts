import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ReportReply } from '@trainyard/application';
import { ensureWorkerBucket } from '@trainyard/blobs';
import { DISPATCH_VERSION } from '@trainyard/events';
import { startNatsServer, workerPermissions, type ChildServer } from '@trainyard/servers';
import { setLogDestination, workerInbox } from '@trainyard/service-kit';
import { tempDir, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { startWorkerProcess, type ServiceProcess } from './processes.ts';

const CONTROL = 'control-pass-0123456789';
const WORKER = 'worker-pass-9876543210';
let dir: Awaited<ReturnType<typeof tempDir>>;
let nats: ChildServer;
let t: TestStack;
let worker: ServiceProcess;

const js = (nc: Parameters<typeof jetstream>[0]) => jetstream(nc, { timeout: 2_000 });

const withLogin = (url: string, user: string, pass: string) =>
  url.replace('nats://', `nats://${user}:${pass}@`);

/** What the stack logs, to see that refused reports are logged. */
const logged: string[] = [];

beforeAll(async () => {
  setLogDestination({ write: (line: string) => void logged.push(line) });
  dir = await tempDir('trainyard-nats-auth-');
  nats = await startNatsServer({
    dir: join(dir.path, 'nats'),
    users: [{ user: 'control', password: CONTROL }],
    workers: [{ user: 'remote', password: WORKER, permissions: workerPermissions('remote') }],
  });
  t = await startTestStack({
    natsUrl: withLogin(nats.url, 'control', CONTROL),
    localWorker: false,
  });
  // A worker with a login of its own writes to a bucket of its own, which the control plane
  // makes (as it does when a worker enrols).
  await ensureWorkerBucket(t.stack.ctx.bus.js, 'remote');
  worker = startWorkerProcess('remote', {
    natsUrl: withLogin(nats.url, 'remote', WORKER),
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
  return connect({
    servers: nats.url,
    reconnect: false,
    inboxPrefix: workerInbox(user ?? 'intruder'),
    ...(user && { user, pass }),
  });
}

describe('a NATS that requires a login', () => {
  it('refuses a connection without one, or with a wrong password', async () => {
    await expect(login()).rejects.toThrow(/authorization/i);
    await expect(login('remote', 'guess')).rejects.toThrow(/authorization/i);
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
    const nc = await login('remote', WORKER);
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
        /Publish Violation - User \\?"remote\\?", Subject \\?"ty\.dispatch\.remote\.cpu/.test(
          readFileSync(join(dir.path, 'nats', 'nats-server.log'), 'utf8'),
        ),
      );
    } finally {
      await nc.close();
    }
  });

  it('appends only what a worker reports for attempts it holds, refusing and logging the rest', async () => {
    const token = await t.token();
    const res = await submit(
      t,
      token,
      { name: 'held', command: 'sleep 60', resources: { gpus: 0 } },
      await codeArchive({ 'x.txt': 'x' }),
    );
    const { id } = (await res.json()) as { id: string };
    const job = await t.waitForJob(id, token, (j) => j.status === 'running', 30_000);
    const attemptId = job.attempts[0]!.id;
    const nc = await login('remote', WORKER);
    const serverLog = () => readFileSync(join(dir.path, 'nats', 'nats-server.log'), 'utf8');
    try {
      const report = async (workerId: string, body: unknown) => {
        const answer = await nc.request(`ty.report.${workerId}`, JSON.stringify(body), {
          timeout: 5_000,
        });
        return answer.json<ReportReply>();
      };
      const finish = {
        kind: 'attempt',
        jobId: id,
        report: {
          type: 'FinishAttempt',
          attemptId,
          exit: { kind: 'exited', exitCode: 0 },
          durationMs: 1,
        },
      };
      const { store } = t.stack.ctx.bus;
      const before = await store.head('job', id);
      expect(
        await report('remote', { ...finish, report: { ...finish.report, attemptId: 'att_other' } }),
      ).toMatchObject({ ok: false, code: 'NOT_YOUR_ATTEMPT' });
      expect(await report('remote', { ...finish, jobId: 'job_not_there' })).toMatchObject({
        ok: false,
        code: 'NOT_YOUR_ATTEMPT',
      });
      expect(await report('remote', { kind: 'attempt', jobId: id })).toMatchObject({
        ok: false,
        code: 'BAD_REPORT',
      });
      const registration = {
        kind: 'worker',
        event: {
          type: 'WorkerRegistered',
          data: {
            name: 'intruder',
            hostname: 'h',
            gpus: [],
            cpuSlots: 1,
            runtime: 'process',
            version: 'x',
          },
        },
      };
      await expect(report('intruder', registration)).rejects.toThrow();
      await expect(report('intruder', finish)).rejects.toThrow();
      await waitFor('the server to log the report for another worker', () =>
        /Publish Violation - User \\?"remote\\?", Subject \\?"ty\.report\.intruder/.test(
          serverLog(),
        ),
      );
      expect(await store.head('job', id)).toEqual(before);
      expect(await store.head('worker', 'intruder')).toEqual({ seq: 0, hash: expect.any(String) });
      const refusals = logged.filter(
        (l) => l.includes('"component":"reports"') && l.includes('"level":40'),
      );
      expect(refusals.some((l) => l.includes('NOT_YOUR_ATTEMPT') && l.includes('remote'))).toBe(
        true,
      );
      expect(refusals.some((l) => l.includes('BAD_REPORT'))).toBe(true);

      const appended = js(nc).publish(`ty.ev.job.${id}`, JSON.stringify({ forged: true }));
      await expect(appended).rejects.toThrow();
      await waitFor('the server to log the refused append', () =>
        /Publish Violation - User \\?"remote\\?", Subject \\?"ty\.ev\.job\./.test(serverLog()),
      );
      expect(await store.head('job', id)).toEqual(before);
    } finally {
      await nc.close();
      await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token });
    }
  });
  it('fails an attempt whose dispatch is of a version the worker cannot read, saying to upgrade it', async () => {
    const token = await t.token();
    const res = await submit(
      t,
      token,
      { name: 'newer', command: 'sleep 60', resources: { gpus: 0 }, maxRetries: 0 },
      await codeArchive({ 'x.txt': 'x' }),
    );
    const { id } = (await res.json()) as { id: string };
    const running = await t.waitForJob(id, token, (j) => j.status === 'running', 30_000);
    const attemptId = running.attempts[0]!.id;
    try {
      const v = DISPATCH_VERSION + 1;
      const newer = { v, kind: 'run', jobId: id, attemptId, placement: { slots: [0] } };
      await t.stack.ctx.bus.js.publish('ty.dispatch.remote.cpu', JSON.stringify(newer), {
        msgID: `newer-${attemptId}`,
      });
      const job = await t.waitForJob(id, token, (j) => j.status === 'failed', 30_000);
      expect(job.attempts[0]!.failure).toMatchObject({ kind: 'system', reason: 'launchError' });
      expect(job.attempts[0]!.failure!.message).toMatch(`version ${v}: upgrade it`);
    } finally {
      await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token });
    }
  });
});
