import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runSessionCommand, type StoredSshPassword } from '@trainyard/application';
import { tempDir } from '@trainyard/testkit';
import { addUser as addUserAs, codeArchive, startTestStack, type TestStack } from './harness.ts';
import { sshKeygen } from './ssh.ts';

/**
 * Sessions and SSH keys through the HTTP API. The stack runs no scheduler and no worker, so a
 * session stays queued until the test itself places it.
 */
let t: TestStack;
let admin: string;
let alice: string;
let bob: string;
let keys: Awaited<ReturnType<typeof tempDir>>;

interface Answer {
  status: number;
  body: Record<string, unknown> & { error?: { code: string; message: string } };
}

async function call(path: string, token: string, init: RequestInit = {}): Promise<Answer> {
  const res = await t.http(path, {
    ...init,
    token,
    ...(init.body !== undefined && { headers: { 'content-type': 'application/json' } }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Answer['body']) : {} };
}

const post = (path: string, token: string, body: unknown = {}) =>
  call(path, token, { method: 'POST', body: JSON.stringify(body) });

const PASSWORDS: Record<string, string> = {
  alice: 'quartz-harbor-maple-7',
  bob: 'velvet-canyon-otter-8',
};

const addUser = (username: string) => addUserAs(t, admin, username, PASSWORDS[username]!);

/** Makes a key with ssh-keygen; returns its public line and the fingerprint ssh-keygen prints. */
function keyPair(name: string, type: string, bits?: number): { line: string; fp: string } {
  const file = join(keys.path, name);
  const fp = sshKeygen(file, type, { comment: `${name}@test`, ...(bits && { bits }) });
  return { line: readFileSync(`${file}.pub`, 'utf8').trim(), fp };
}

const session = (over: object = {}) => ({ resources: { gpus: 1 }, ...over });

beforeAll(async () => {
  t = await startTestStack({ without: ['scheduler'], localWorker: false });
  keys = await tempDir('trainyard-keys-');
  admin = await t.token();
  alice = await addUser('alice');
  bob = await addUser('bob');
});

afterAll(async () => {
  await t?.stop();
  await keys?.remove();
});

describe('sessions', () => {
  it('requests a session: queued, with the timers in force, seen by its owner and admins only', async () => {
    const made = await post(
      '/v1/sessions',
      alice,
      session({ name: 'nb', timers: { idleMin: 45 } }),
    );
    expect(made.status).toBe(202);
    const { id, seq } = made.body as { id: string; seq: number };
    expect(id).toMatch(/^ses_[0-9a-z]{22}$/);
    expect(made.body.status).toBe('queued');

    const shown = await call(`/v1/sessions/${id}?after=${seq}`, alice);
    expect(shown.status).toBe(200);
    expect(shown.body).toMatchObject({
      id,
      name: 'nb',
      owner: 'alice',
      status: 'queued',
      resources: { gpus: 1 },
      timers: { connectMin: 10, idleMin: 45, maxMin: 360 },
      workerId: null,
      runs: 0,
      stopsAt: null,
    });

    const ids = async (path: string, token: string) =>
      ((await call(path, token)).body as unknown as { id: string }[]).map((s) => s.id);
    expect(await ids('/v1/sessions', alice)).toContain(id);
    expect(await ids('/v1/sessions', bob)).not.toContain(id);
    expect(await ids('/v1/sessions?all=true', admin)).toContain(id);
    expect((await call('/v1/sessions?all=true', bob)).status).toBe(403);
    expect((await call(`/v1/sessions/${id}`, admin)).status).toBe(200);
    const hidden = await call(`/v1/sessions/${id}`, bob);
    expect(hidden.status).toBe(404);
    expect(hidden.body.error?.code).toBe('SESSION_NOT_FOUND');

    // Its log is the build of its image: a session with none to build has an empty one.
    const log = await t.http(`/v1/sessions/${id}/logs?follow=true`, { token: alice });
    expect(log.status).toBe(200);
    expect(await log.text()).toBe('');
    expect((await t.http(`/v1/sessions/${id}/logs`, { token: bob })).status).toBe(404);
    expect((await t.http(`/v1/sessions/${id}/logs`)).status).toBe(401);
  });

  it('refuses a bad spec and a timer above its cap with 400, and appends nothing', async () => {
    const store = t.stack.ctx.bus.store;
    const before = await store.lastSeq();
    const cases: [object, string][] = [
      [{ resources: { gpus: -1 } }, 'resources.gpus'],
      [{ resources: { gpus: 0, vram: 3 } }, 'vram'],
      [{ resources: { gpus: 0 }, command: 'bash' }, 'command'],
      [
        { resources: { gpus: 0, gpuModel: 'A100' } },
        'a GPU model is for sessions that ask for GPUs',
      ],
      [{ resources: { gpus: 0, memoryGb: 4 } }, 'a memory limit holds for sessions in containers'],
      [session({ timers: { idleMin: 0 } }), 'timers.idleMin'],
      [session({ timers: { idleMin: 241 } }), 'at most 240 minutes'],
      [session({ timers: { maxMin: 1441 } }), 'TRAINYARD_SESSION_MAX_CAP_MIN'],
      [session({ timers: { connectMin: 61 } }), 'at most 60 minutes'],
      [session({ name: 'evil\u202ename' }), 'control and bidirectional characters'],
      [session({ fromJob: '../etc' }), 'fromJob'],
      [session({ fromJob: 'job_01ABC' }), 'fromJob: this cluster runs no containers'],
      [session({ image: 'python' }), 'image: this cluster runs sessions on its workers’ hosts'],
      [session({ image: 'python\nRUN id' }), 'an image reference'],
    ];
    for (const [spec, words] of cases) {
      const res = await post('/v1/sessions', alice, spec);
      expect(res.status, JSON.stringify(spec)).toBe(400);
      expect(res.body.error?.code).toBe('VALIDATION_FAILED');
      expect(res.body.error?.message, JSON.stringify(spec)).toContain(words);
    }
    expect(await store.hasAfter(before, 'ty.ev.session.>')).toBe(false);
  });

  it("takes code as multipart, checked as a job's is; a dry run and a refused archive append nothing", async () => {
    const store = t.stack.ctx.bus.store;
    const form = (spec: object, code?: Uint8Array) => {
      const body = new FormData();
      body.set('spec', JSON.stringify(spec));
      if (code) body.set('code', new Blob([new Uint8Array(code)]), 'code.tar.gz');
      return body;
    };
    const send = async (path: string, body: FormData) => {
      const res = await t.http(path, { method: 'POST', body, token: alice });
      return { status: res.status, body: (await res.json()) as Answer['body'] };
    };
    const before = await store.lastSeq();
    const code = await codeArchive({ 'train.py': 'print(1)\n' });
    const dry = await send('/v1/sessions?dryRun=true', form(session(), code));
    expect(dry).toEqual({ status: 200, body: { valid: true } });
    const notArchive = await send('/v1/sessions', form(session(), Buffer.from('plain text')));
    expect(notArchive.status).toBe(400);
    expect(notArchive.body.error?.message).toContain('.zip or .tar.gz');
    const badSpec = await send('/v1/sessions', form({ resources: { gpus: -1 } }, code));
    expect(badSpec.status).toBe(400);
    expect(badSpec.body.error?.message).toContain('spec.resources.gpus');
    expect(await store.hasAfter(before, 'ty.ev.session.>')).toBe(false);

    const made = await send('/v1/sessions', form(session(), code));
    expect(made.status).toBe(202);
    const id = made.body.id as string;
    const [requested] = (await store.load('session', id)).events;
    expect(requested?.type).toBe('SessionRequested');
    const kept = (requested?.data as { code?: { key: string; sizeBytes: number } }).code;
    expect(kept).toMatchObject({
      key: `sessions/${id}/code`,
      sizeBytes: code.length,
      format: 'tar.gz',
    });
    expect(await t.stack.ctx.blobs.stat(kept!.key)).toEqual({ sizeBytes: code.length });
  });

  it('stops a queued session at once; stopping it again is 409 SESSION_ENDED', async () => {
    const { id } = (await post('/v1/sessions', alice, session())).body as { id: string };
    expect((await post(`/v1/sessions/${id}/stop`, bob)).status).toBe(404);
    const stopped = await post(`/v1/sessions/${id}/stop`, alice);
    expect(stopped.status).toBe(202);
    expect(stopped.body.status).toBe('stopped');
    const shown = await call(`/v1/sessions/${id}?after=${stopped.body.seq as number}`, alice);
    expect(shown.body).toMatchObject({ status: 'stopped', stopReason: 'user' });
    expect(shown.body.endedAt).toEqual(expect.any(String));
    const again = await post(`/v1/sessions/${id}/stop`, alice);
    expect(again.status).toBe(409);
    expect(again.body.error?.code).toBe('SESSION_ENDED');
    expect((await post(`/v1/sessions/${id}/connect`, alice)).status).toBe(409);
  });

  it('connects only to a running session, with a one-time password whose hash the gateway finds', async () => {
    const { id } = (await post('/v1/sessions', alice, session())).body as { id: string };
    const early = await post(`/v1/sessions/${id}/connect`, alice);
    expect(early.status).toBe(409);
    expect(early.body.error?.code).toBe('INVALID_TRANSITION');
    expect(early.body.error?.message).toContain(`session ${id} is queued: only a running session`);

    // What the scheduler and the worker would do: place it on a worker, and start it there.
    const store = t.stack.ctx.bus.store;
    const meta = { actor: { kind: 'service' as const, id: 'test' }, now: new Date() };
    const place = { runId: `${id}-r1`, workerId: 'ghost', gpus: [0], vramBytes: 0, cpus: 0 };
    await runSessionCommand(store, id, { type: 'AssignSession', ...place }, meta);
    await runSessionCommand(store, id, { type: 'StartRun', runId: place.runId }, meta);

    expect((await post(`/v1/sessions/${id}/connect`, bob)).status).toBe(404);
    expect((await post(`/v1/sessions/${id}/connect`, admin)).status).toBe(403);
    // The stack's gateway showed its host key when it started; without one, connect cannot work.
    const gateway = await new Kvm(t.stack.ctx.bus.js).open('ty_gateway_public');
    const kept = (await gateway.get('hostKey'))!;
    const hostKey = kept.json<{ publicKey: string; fingerprint: string }>();
    await gateway.delete('hostKey');
    const noGateway = await post(`/v1/sessions/${id}/connect`, alice);
    await gateway.put('hostKey', kept.string());
    expect(noGateway.status).toBe(503);
    expect(noGateway.body.error).toMatchObject({
      code: 'GATEWAY_UNAVAILABLE',
      message: 'the SSH gateway has not started yet',
    });

    const first = await post(`/v1/sessions/${id}/connect`, alice);
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({
      host: '127.0.0.1',
      port: t.stack.gateway!.port,
      username: id,
      hostKey: hostKey.publicKey,
      hostKeyFingerprint: hostKey.fingerprint,
    });
    const password = first.body.password as string;
    expect(Buffer.from(password, 'base64url')).toHaveLength(24);
    const expiresIn = Date.parse(first.body.expiresAt as string) - Date.now();
    expect(expiresIn).toBeGreaterThan(240_000);
    expect(expiresIn).toBeLessThanOrEqual(300_000);

    const passwords = await new Kvm(t.stack.ctx.bus.js).open('ty_ssh_passwords');
    const stored = (await passwords.get(id))!.json<StoredSshPassword>();
    expect(stored).toEqual({
      sha256: createHash('sha256').update(password).digest('hex'),
      expiresAt: first.body.expiresAt,
      runId: place.runId,
      owner: 'alice',
    });
    const second = await post(`/v1/sessions/${id}/connect`, alice);
    expect(second.body.password).not.toBe(password);
    const replaced = (await passwords.get(id))!.json<StoredSshPassword>();
    expect(replaced.sha256).toBe(
      createHash('sha256')
        .update(second.body.password as string)
        .digest('hex'),
    );

    const running = await call(`/v1/sessions/${id}`, alice);
    expect(running.body).toMatchObject({
      status: 'running',
      workerId: 'ghost',
      gpus: [0],
      runs: 1,
    });
    expect(Date.parse(running.body.stopsAt as string)).toBe(
      Date.parse(running.body.startedAt as string) + 10 * 60_000,
    );
    const stopping = await post(`/v1/sessions/${id}/stop`, alice);
    expect(stopping.body.status).toBe('stopping');
  });
});

describe('the API document', () => {
  it('lists the session and SSH key routes, with their statuses', async () => {
    const doc = (await (await t.http('/docs/json')).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
      components: { schemas: Record<string, { properties?: Record<string, { enum?: string[] }> }> };
    };
    for (const path of [
      '/v1/sessions',
      '/v1/sessions/{id}',
      '/v1/sessions/{id}/stop',
      '/v1/sessions/{id}/connect',
      '/v1/sessions/{id}/logs',
      '/v1/ssh-gateway',
      '/v1/me/ssh-keys',
      '/v1/me/ssh-keys/{fingerprint}',
    ])
      expect(Object.keys(doc.paths), path).toContain(path);
    expect(Object.keys(doc.paths['/v1/sessions/{id}/connect']!.post!.responses)).toEqual(
      expect.arrayContaining(['200', '403', '404', '409', '503']),
    );
    expect(doc.components.schemas.Session!.properties!.status!.enum).toContain('stopping');
    expect(JSON.stringify(doc)).toContain('SSH_KEY_EXISTS');
  });
});

describe('SSH keys', () => {
  it('registers keys made by ssh-keygen under the fingerprint ssh-keygen prints, once across users', async () => {
    const ed = keyPair('alice-ed', 'ed25519');
    const added = await post('/v1/me/ssh-keys', alice, { publicKey: ed.line });
    expect(added.status).toBe(201);
    expect(added.body).toMatchObject({
      fingerprint: ed.fp,
      type: 'ssh-ed25519',
      name: 'alice-ed@test',
      publicKey: ed.line.split(' ').slice(0, 2).join(' '),
    });
    const rsa = keyPair('alice-rsa', 'rsa', 3072);
    const named = await post('/v1/me/ssh-keys', alice, { publicKey: rsa.line, name: 'laptop' });
    expect(named.body).toMatchObject({ fingerprint: rsa.fp, type: 'ssh-rsa', name: 'laptop' });

    const mine = await post('/v1/me/ssh-keys', alice, { publicKey: ed.line });
    expect(mine.status).toBe(409);
    expect(mine.body.error?.code).toBe('SSH_KEY_EXISTS');
    const theirs = await post('/v1/me/ssh-keys', bob, { publicKey: `${ed.line} copied` });
    expect(theirs.status).toBe(409);
    expect(theirs.body.error?.code).toBe('SSH_KEY_EXISTS');

    const list = async (token: string) =>
      ((await call('/v1/me/ssh-keys', token)).body as unknown as { fingerprint: string }[]).map(
        (k) => k.fingerprint,
      );
    expect(await list(alice)).toEqual([ed.fp, rsa.fp]);
    expect(await list(bob)).toEqual([]);

    const path = `/v1/me/ssh-keys/${encodeURIComponent(ed.fp)}`;
    const notBobs = await call(path, bob, { method: 'DELETE' });
    expect(notBobs.status).toBe(404);
    expect((await call(path, alice, { method: 'DELETE' })).status).toBe(204);
    expect((await call(path, alice, { method: 'DELETE' })).status).toBe(404);
    expect(await list(alice)).toEqual([rsa.fp]);
    const nowBobs = await post('/v1/me/ssh-keys', bob, { publicKey: ed.line });
    expect(nowBobs.status).toBe(201);
    expect(await list(bob)).toEqual([ed.fp]);
  });

  it('refuses keys it cannot use with a 400 that says why', async () => {
    const short = keyPair('short', 'rsa', 1024);
    const cases: [string, string][] = [
      [short.line, 'RSA key of 1024 bits is too short'],
      ['not a key at all', 'not an OpenSSH public key line'],
      [
        `ssh-rsa ${keyPair('typed', 'ed25519').line.split(' ')[1]}`,
        'the key inside is ssh-ed25519',
      ],
      [short.line.split(' ').slice(0, 2).join(' ').slice(0, 120), 'the key ends'],
    ];
    for (const [publicKey, words] of cases) {
      const res = await post('/v1/me/ssh-keys', alice, { publicKey });
      expect(res.status, publicKey).toBe(400);
      expect(res.body.error?.code).toBe('VALIDATION_FAILED');
      expect(res.body.error?.message).toContain(words);
    }
  });
});
