import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { nkeyAuthenticator } from '@nats-io/nats-core';
import { createUser } from '@nats-io/nkeys';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EMPTY_HEAD, getStoredMessage } from '@trainyard/events';
import { BlobKeys, JetStreamBlobStore } from '@trainyard/blobs';
import { workerInbox } from '@trainyard/service-kit';
import { tempDir, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type Job, type TestStack } from './harness.ts';
import { runCli, startEnrollingWorker, type Run, type ServiceProcess } from './processes.ts';

let t: TestStack;
let admin: string;
let dir: Awaited<ReturnType<typeof tempDir>>;
let worker: ServiceProcess;
let exitCode: Promise<number | null>;
/** The job that ran on w1, with an output. */
let ranOnW1: string;
let attemptOnW1: string;

const json = (body: unknown, token?: string) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
  ...(token && { token }),
});

/** The control plane's login, from the NATS URL the stack holds. */
function login() {
  const m = /\/\/([^:]+):([^@]+)@/.exec(t.natsUrl)!;
  return { user: m[1]!, pass: m[2]! };
}

const serverLog = () => readFileSync(join(t.home, 'nats', 'nats-server.log'), 'utf8');
const natsAddress = () => t.natsUrl.replace(/\/\/[^@]*@/, '//');

async function issue(body: object = {}): Promise<string> {
  const res = await t.http('/v1/workers/tokens', json(body, admin));
  expect(res.status).toBe(201);
  return ((await res.json()) as { token: string }).token;
}

async function refused(res: Response, status: number, code: string) {
  expect(res.status).toBe(status);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe(code);
}

/** Runs the CLI as the admin, as an operator would. */
function cli(args: string[]): Promise<Run> {
  return runCli(args, {
    env: {
      ...process.env,
      TRAINYARD_API_URL: t.url,
      TRAINYARD_TOKEN: admin,
      XDG_CONFIG_HOME: join(dir.path, 'config'),
      TRAINYARD_HOME: join(dir.path, 'cli-home'),
    },
  });
}

/** A connection with a worker's key, as a compromised worker host would make. */
function withKey(seed: string) {
  return connect({
    servers: natsAddress(),
    authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
    inboxPrefix: workerInbox('w1'),
    reconnect: false,
  });
}

beforeAll(async () => {
  t = await startTestStack({ localWorker: false, expectViolations: true });
  admin = await t.token();
  dir = await tempDir('trainyard-enrol-');
  const made = await cli(['worker', 'token', 'create', 'w1', '--ttl', '10m']);
  expect(made.code).toBe(0);
  expect(made.stderr).toContain('trainyard worker --name w1');
  const token = made.stdout.trim();
  expect(token).toMatch(/^tyw_/);
  worker = startEnrollingWorker('w1', { token, apiUrl: t.url, dir: dir.path });
  exitCode = new Promise((r) => worker.child.once('exit', (code) => r(code)));
  await waitFor(
    'w1 to register',
    async () => {
      const res = await t.http('/v1/workers', { token: admin });
      const list = (await res.json()) as { id: string; status: string }[];
      return list.some((w) => w.id === 'w1' && w.status === 'online');
    },
    { timeoutMs: 30_000 },
  );
});

afterAll(async () => {
  await worker?.stop();
  await t?.stop();
  await dir?.remove();
});

const keyOfW1 = () =>
  JSON.parse(readFileSync(join(dir.path, 'home', 'secrets', 'worker-w1.json'), 'utf8')) as {
    seed: string;
    publicKey: string;
  };

describe('worker enrolment', () => {
  it('issues tokens to admins only, and takes each token once', async () => {
    await refused(await t.http('/v1/workers/tokens', json({})), 401, 'UNAUTHENTICATED');
    await t.http(
      '/v1/users',
      json({ username: 'plain', password: 'a-long-enough-secret-7', role: 'user' }, admin),
    );
    const plain = await t.token('plain', 'a-long-enough-secret-7');
    await refused(await t.http('/v1/workers/tokens', json({}, plain)), 403, 'FORBIDDEN');

    const publicKey = createUser().getPublicKey();
    const token = await issue();
    const enrol = (body: object) => t.http('/v1/workers/enrol', json(body));
    await refused(
      await enrol({ token: 'tyw_guess', name: 'w9', publicKey }),
      403,
      'ENROLMENT_REFUSED',
    );
    await refused(
      await enrol({ token, name: 'w9', publicKey: 'not-a-key' }),
      400,
      'VALIDATION_FAILED',
    );
    await refused(await enrol({ token, name: '../w9', publicKey }), 400, 'VALIDATION_FAILED');
    await refused(await enrol({ token, name: 'w1', publicKey }), 409, 'WORKER_EXISTS');
    await t.stack.ctx.bus.store.append({
      aggregate: 'worker',
      aggregateId: 'w-local',
      head: EMPTY_HEAD,
      events: [
        {
          type: 'WorkerRegistered',
          data: {
            name: 'w-local',
            hostname: 'h',
            gpus: [],
            cpuSlots: 0,
            runtime: 'process',
            version: 't',
            runningAttempts: [],
          },
        },
      ],
      meta: { actor: { kind: 'service', id: 'test' }, now: new Date() },
    });
    await refused(await enrol({ token, name: 'w-local', publicKey }), 409, 'WORKER_EXISTS');
    const ok = await enrol({ token, name: 'w9', publicKey });
    expect(ok.status).toBe(201);
    expect(((await ok.json()) as { natsUrl: string }).natsUrl).toBe(natsAddress());
    await refused(await enrol({ token, name: 'w10', publicKey }), 403, 'ENROLMENT_REFUSED');

    const named = await issue({ name: 'w11' });
    await refused(await enrol({ token: named, name: 'w12', publicKey }), 403, 'ENROLMENT_REFUSED');
  });

  it('runs a job on an enrolled worker, each service on its own login, with nothing refused', async () => {
    const code = await codeArchive({
      'train.sh':
        'echo on-w1; echo 42 > "$TRAINYARD_OUTPUT_DIR/result.txt"\n' +
        'echo \'TRAINYARD_METRIC {"step": 1, "loss": 0.5}\'\n',
    });
    const res = await submit(
      t,
      admin,
      { name: 'enrolled', command: 'sh train.sh', resources: { gpus: 0 }, setup: 'true' },
      code,
    );
    const { id } = (await res.json()) as { id: string };
    ranOnW1 = id;
    const job = await t.waitForJob(id, admin, (j) => j.status === 'succeeded', 30_000);
    attemptOnW1 = job.attempts[0]!.id;
    expect(job.attempts[0]!.workerId).toBe('w1');
    expect(await (await t.http(`/v1/jobs/${id}/logs`, { token: admin })).text()).toContain('on-w1');
    const outputs = (await (await t.http(`/v1/jobs/${id}/outputs`, { token: admin })).json()) as {
      path: string;
    }[];
    expect(outputs.map((o) => o.path)).toEqual(['result.txt']);
    // Its metrics travel on the worker's own login, to the projector on its own.
    await waitFor('the job’s metrics', async () => {
      const r = await t.http(`/v1/jobs/${id}/metrics`, { token: admin });
      const m = (await r.json()) as { summary: { name: string; last: number }[] };
      return m.summary.length === 1 && m.summary[0]!.last === 0.5;
    });
    const file = join(dir.path, 'home', 'secrets', 'worker-w1.json');
    expect(readFileSync(file, 'utf8')).toContain(keyOfW1().publicKey);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(serverLog()).not.toMatch(/Violation/);
  });

  it('lets a worker’s key act only as that worker', async () => {
    const nc = await withKey(keyOfW1().seed);
    try {
      nc.publish('ty.hb.w9', JSON.stringify({ workerId: 'w9' }));
      await expect(
        nc.request('ty.report.w9', JSON.stringify({ kind: 'self' }), { timeout: 1_000 }),
      ).rejects.toThrow();
      nc.publish('ty.ev.job.job_x', 'forged');
      nc.subscribe('_INBOX.>');
      const js = jetstream(nc, { timeout: 1_000 });
      await expect(js.consumers.get('TY_DISPATCH', 'worker_w9_cpu')).rejects.toThrow();
      const jsm = await jetstreamManager(nc, { timeout: 1_000 });
      await expect(
        jsm.consumers.add('TY_DISPATCH', {
          durable_name: 'mine',
          filter_subject: 'ty.dispatch.w9.cpu',
        }),
      ).rejects.toThrow();
      await expect(jsm.streams.delete('TY_EVENTS')).rejects.toThrow();
      const keys = await new Kvm(js).open('ty_worker_keys').catch((err: Error) => err);
      if (!(keys instanceof Error)) await expect(keys.get('w1')).rejects.toThrow();
      // Live logs: only the newest chunk of its own attempts, by subject.
      const own = await jsm.direct.getMessage('TY_LOGS', {
        last_by_subj: `ty.log.${ranOnW1}.1.w1`,
      });
      expect(own?.string()).toContain('on-w1');
      // Code and artifacts: only through the control plane, only of attempts it holds now.
      const fetch = async (key: string, subject = 'ty.fetch.w1') =>
        (
          await nc.request(subject, JSON.stringify({ key, cursor: null }), { timeout: 5_000 })
        ).headers?.get('Trainyard-Error');
      expect(await fetch(BlobKeys.code(ranOnW1))).toBe('NOT_YOURS');
      expect(await fetch('snapshots/scheduler')).toBe('NOT_YOURS');
      expect(await fetch('jobs/../code')).toBe('NOT_YOURS');
      // Nor the code of a session whose run it does not hold.
      expect(await fetch(BlobKeys.sessionCode('ses_elsewhere'))).toBe('NOT_YOURS');
      expect(await fetch('sessions/../jobs/x/code')).toBe('NOT_YOURS');
      // Nor the outputs of an attempt of a job it does not hold.
      expect(await fetch(BlobKeys.attemptOutput(ranOnW1, 'att_1', 'ckpt.bin'))).toBe('NOT_YOURS');
      nc.publish('ty.fetch.w9', JSON.stringify({ key: BlobKeys.code(ranOnW1), cursor: null }));
      const logs = [
        `$JS.API.DIRECT.GET.TY_LOGS.ty.log.${ranOnW1}.1.w9`,
        '$JS.API.DIRECT.GET.TY_LOGS',
        '$JS.API.STREAM.MSG.GET.TY_LOGS',
        '$JS.API.DIRECT.GET.OBJ_trainyard',
        '$JS.API.STREAM.INFO.OBJ_trainyard',
        'ty.fetch.w9',
      ];
      for (const subject of logs) nc.publish(subject, JSON.stringify({ seq: 1 }));
      await nc.flush();
      await waitFor('the server to log each refusal', () => {
        const log = serverLog();
        const key = keyOfW1().publicKey;
        return (
          ['"ty.hb.w9"', '"ty.report.w9"', '"ty.ev.job.job_x"', ...logs.map((l) => `"${l}"`)].every(
            (s) => log.includes(`Publish Violation - Nkey "${key}", Subject ${s}`),
          ) && log.includes(`Subscription Violation - Nkey "${key}", Subject "_INBOX.>"`)
        );
      });
      const self = await nc.request('ty.report.w1', JSON.stringify({ kind: 'self' }), {
        timeout: 5_000,
      });
      expect(self.json<{ ok: boolean }>().ok).toBe(true);
    } finally {
      await nc.close();
    }
  });

  it('keeps what a worker writes in its own bucket and its logs under its own name', async () => {
    const control = await connect({ servers: natsAddress(), ...login(), reconnect: false });
    try {
      const shared = await JetStreamBlobStore.open(jetstream(control), 'trainyard', 1, false);
      const own = await shared.ofWorker('w1');
      expect(own).not.toBe(shared);
      const result = BlobKeys.attemptOutput(ranOnW1, attemptOnW1, 'result.txt');
      expect(await own.stat(result)).not.toBeNull();
      expect(await own.stat(BlobKeys.log(ranOnW1, 1))).not.toBeNull();
      expect(await shared.stat(result)).toBeNull();
      await expect(shared.ofWorker('nobody')).rejects.toThrow(/no object store bucket/);
    } finally {
      await control.close();
    }

    const nc = await withKey(keyOfW1().seed);
    try {
      const js = jetstream(nc, { timeout: 1_000 });
      const jsm = await jetstreamManager(nc, { timeout: 1_000 });
      // The shared store (code, artifacts, the scheduler's snapshot) and other workers' buckets.
      nc.publish(
        `$O.trainyard.M.${Buffer.from(BlobKeys.code(ranOnW1)).toString('base64url')}`,
        '{}',
      );
      nc.publish('$O.ty_w_w9.C.x', 'chunk');
      await expect(jsm.streams.purge('OBJ_trainyard')).rejects.toThrow();
      // Another worker's name on a log, and a build's log.
      nc.publish(`ty.log.${ranOnW1}.1.w9`, 'FORGED-AS-W9');
      nc.publish(`ty.log.${ranOnW1}.0`, 'FORGED-BUILD');
      const forgedPoint = (loss: number) =>
        JSON.stringify({
          points: [
            {
              source: 'output',
              offset: 9999,
              at: new Date().toISOString(),
              step: 9,
              epoch: null,
              values: { loss },
            },
          ],
        });
      nc.publish(`ty.metric.${ranOnW1}.1.w9`, forgedPoint(666));
      // Under its own name, for an attempt it never held, and a build's subject it may not use.
      await js.publish(`ty.log.${ranOnW1}.2.w1`, 'FORGED-ATTEMPT', { msgID: 'forged-2' });
      await js.publish(`ty.log.${ranOnW1}.0.w1`, 'FORGED-ZERO', { msgID: 'forged-0' });
      await js.publish(`ty.metric.${ranOnW1}.2.w1`, forgedPoint(667));
      await nc.flush();
      const key = keyOfW1().publicKey;
      await waitFor('the server to log each refusal', () => {
        const log = serverLog();
        return [
          '"$O.trainyard.M.',
          '"$O.ty_w_w9.C.x"',
          '"$JS.API.STREAM.PURGE.OBJ_trainyard"',
          `"ty.log.${ranOnW1}.1.w9"`,
          `"ty.log.${ranOnW1}.0"`,
          `"ty.metric.${ranOnW1}.1.w9"`,
        ].every((s) => log.includes(`Publish Violation - Nkey "${key}", Subject ${s}`));
      });
    } finally {
      await nc.close();
    }
    const log = await (await t.http(`/v1/jobs/${ranOnW1}/logs`, { token: admin })).text();
    expect(log).toContain('on-w1');
    expect(log).not.toMatch(/FORGED/);
    const metrics = await (await t.http(`/v1/jobs/${ranOnW1}/metrics`, { token: admin })).json();
    expect(metrics).toMatchObject({ summary: [{ name: 'loss', count: 1, last: 0.5 }] });
    const code = await t.http(`/v1/jobs/${ranOnW1}/outputs/result.txt`, { token: admin });
    expect((await code.text()).trim()).toBe('42');
  });

  it('keeps what the server sends for a worker out of the control plane’s streams', async () => {
    // Bytes of w1's choosing, stored where it may write: its own bucket.
    const forged = JSON.stringify({ type: 'JobCancelled', hash: 'forged', password: 'forged' });
    const chunk = '$O.ty_w_w1.C.forged';
    // Where a JetStream answer would do harm if a stream stored it.
    const aims: [stream: string, subject: string][] = [
      ['TY_EVENTS', 'ty.ev.job.job_forged'],
      ['TY_DISPATCH', 'ty.dispatch.w9.cpu'],
      ['TY_HEARTBEATS', 'ty.hb.w9'],
      ['TY_LOGS', `ty.log.${ranOnW1}.1.w9`],
      ['KV_ty_credentials', '$KV.ty_credentials.forged'],
      ['KV_ty_config', '$KV.ty_config.forged'],
      ['OBJ_trainyard', '$O.trainyard.M.forged'],
    ];
    const nc = await withKey(keyOfW1().seed);
    try {
      await jetstream(nc, { timeout: 2_000 }).publish(chunk, forged);
      const get = JSON.stringify({ last_by_subj: chunk });
      // The call itself is allowed and answers with the stored bytes...
      const own = await nc.request('$JS.API.DIRECT.GET.OBJ_ty_w_w1', get, { timeout: 2_000 });
      expect(own.string()).toBe(forged);
      // ...but an answer aimed elsewhere lands in the workers' account, where nothing keeps it.
      for (const [, reply] of aims) {
        nc.publish('$JS.API.DIRECT.GET.OBJ_ty_w_w1', get, { reply });
        nc.publish('$JS.API.INFO', '', { reply });
      }
      await nc.flush();
    } finally {
      await nc.close();
    }
    const control = await connect({ servers: natsAddress(), ...login(), reconnect: false });
    try {
      const jsm = await jetstreamManager(control);
      // The control plane's own login, aiming the same call at a subject: stored, as nats-server
      // does within one account; so a miss below is the account boundary at work.
      control.publish('$JS.API.INFO', '', { reply: 'ty.hb.control-aimed' });
      await control.flush();
      await waitFor('the control plane’s own answer to be stored', async () =>
        Boolean(
          await getStoredMessage(
            jsm,
            'TY_HEARTBEATS',
            { last_by_subj: 'ty.hb.control-aimed' },
            'read',
          ),
        ),
      );
      for (const [stream, subject] of aims) {
        const stored = await getStoredMessage(jsm, stream, { last_by_subj: subject }, 'read');
        expect(stored, `${stream} ${subject}`).toBeNull();
      }
    } finally {
      await control.close();
    }
  });

  it('cuts a revoked worker off within seconds and runs its attempt elsewhere', async () => {
    const res = await submit(t, admin, {
      name: 'cut-off',
      command: 'sleep 120',
      resources: { gpus: 0 },
      maxRetries: 1,
    });
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, admin, (j) => j.status === 'running', 30_000);

    await refused(
      await t.http('/v1/workers/nobody', { method: 'DELETE', token: admin }),
      404,
      'WORKER_NOT_FOUND',
    );
    const startedAt = Date.now();
    const revoked = await cli(['worker', 'revoke', 'w1', '--json']);
    expect(revoked.code).toBe(0);
    expect(JSON.parse(revoked.stdout)).toEqual({ name: 'w1', markedLost: true });

    expect(await exitCode).toBe(3);
    expect(Date.now() - startedAt).toBeLessThan(10_000);
    const job: Job = await t.waitForJob(id, admin, (j) => j.attempts[0]?.status === 'failed');
    expect(job.attempts[0]!.failure).toMatchObject({ kind: 'system', reason: 'workerLost' });
    expect(['retrying', 'queued']).toContain(job.status);
    await waitFor('w1 to show as revoked', async () => {
      const res = await t.http('/v1/workers', { token: admin });
      const list = (await res.json()) as { id: string; status: string }[];
      return list.find((w) => w.id === 'w1')?.status === 'revoked';
    });
    await expect(withKey(keyOfW1().seed)).rejects.toThrow(/authorization/i);

    const control = await connect({
      servers: natsAddress(),
      inboxPrefix: workerInbox('w1'),
      ...login(),
    });
    try {
      const register = {
        kind: 'worker',
        event: {
          type: 'WorkerRegistered',
          data: {
            name: 'w1',
            hostname: 'h',
            gpus: [],
            cpuSlots: 1,
            runtime: 'process',
            version: 't',
          },
        },
      };
      const answer = await control.request('ty.report.w1', JSON.stringify(register), {
        timeout: 5_000,
      });
      expect(answer.json()).toMatchObject({ ok: false, code: 'REVOKED' });
    } finally {
      await control.close();
    }
  });

  it('gives a revoked name back only through a token that names it', async () => {
    const key = createUser();
    const publicKey = key.getPublicKey();
    const enrol = (body: object) => t.http('/v1/workers/enrol', json(body));
    await refused(
      await enrol({ token: await issue(), name: 'w1', publicKey }),
      409,
      'WORKER_EXISTS',
    );
    const back = await enrol({ token: await issue({ name: 'w1' }), name: 'w1', publicKey });
    expect(back.status).toBe(201);
    const seed = new TextDecoder().decode(key.getSeed());
    await waitFor('the new key to be let in', async () => {
      const nc = await withKey(seed).catch(() => null);
      await nc?.close();
      return nc !== null;
    });
  });
});

describe('the control plane’s own logins on up’s NATS', () => {
  const logins = () =>
    JSON.parse(readFileSync(join(t.home, 'secrets', 'nats.json'), 'utf8')) as Record<
      string,
      string
    >;
  const as = (user: string) =>
    connect({
      servers: natsAddress(),
      user,
      pass: logins()[user]!,
      inboxPrefix: `_INBOX_S.${user}`,
      reconnect: false,
    });

  it('lets only the API read the secret buckets, and only the gateway its private host key', async () => {
    const api = await as('api');
    const gateway = await as('gateway');
    try {
      const js = jetstream(api, { timeout: 2_000 });
      const kv = await new Kvm(js).open('ty_credentials');
      expect(await kv.get('admin')).not.toBeNull();
      const shown = await new Kvm(js).open('ty_gateway_public');
      const { publicKey } = (await shown.get('hostKey'))!.json<{ publicKey: string }>();
      expect(publicKey).toMatch(/^ssh-ed25519 /);
      const hidden = await new Kvm(js).open('ty_gateway').catch((err: Error) => err);
      if (!(hidden instanceof Error)) {
        await expect(hidden.get('hostKey')).rejects.toThrow();
      }
      const own = await new Kvm(jetstream(gateway, { timeout: 2_000 })).open('ty_gateway');
      expect((await own.get('hostKey'))!.json<{ privateKey: string }>().privateKey).toContain(
        'PRIVATE KEY',
      );
    } finally {
      await api.close();
      await gateway.close();
    }
    for (const user of ['builder', 'scheduler', 'projector', 'watchdog']) {
      const nc = await as(user);
      try {
        const js = jetstream(nc, { timeout: 1_000 });
        for (const bucket of ['ty_credentials', 'ty_config', 'ty_sessions']) {
          const kv = await new Kvm(js).open(bucket).catch((err: Error) => err);
          if (kv instanceof Error) continue;
          await expect(kv.get('admin'), `${user} reading ${bucket}`).rejects.toThrow();
        }
      } finally {
        await nc.close();
      }
    }
  });

  it('keeps each service to what it does, and none may take the log apart', async () => {
    const builder = await as('builder');
    const projector = await as('projector');
    try {
      builder.publish('ty.ev.user.mallory', 'forged');
      builder.subscribe('_INBOX.>');
      projector.publish('ty.ev.job.job_x', 'forged');
      const jsm = await jetstreamManager(builder, { timeout: 1_000 });
      await expect(jsm.streams.delete('TY_EVENTS')).rejects.toThrow();
      await expect(jsm.streams.purge('TY_DISPATCH')).rejects.toThrow();
      await expect(
        jsm.streams.add({ name: 'COPY', subjects: [], sources: [{ name: 'KV_ty_credentials' }] }),
      ).rejects.toThrow();
      await Promise.all([builder.flush(), projector.flush()]);
      await waitFor('the server to log each refusal', () => {
        const log = serverLog();
        return (
          log.includes('Publish Violation - User "builder", Subject "ty.ev.user.mallory"') &&
          log.includes('Subscription Violation - User "builder", Subject "_INBOX.>"') &&
          log.includes(
            'Publish Violation - User "builder", Subject "$JS.API.STREAM.CREATE.COPY"',
          ) &&
          log.includes('Publish Violation - User "projector", Subject "ty.ev.job.job_x"') &&
          log.includes(
            'Publish Violation - User "builder", Subject "$JS.API.STREAM.DELETE.TY_EVENTS"',
          )
        );
      });
    } finally {
      await builder.close();
      await projector.close();
    }
  });
});
