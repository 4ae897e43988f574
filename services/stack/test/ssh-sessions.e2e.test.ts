import { createHash, randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionEvent, StoredEvent } from '@trainyard/events';
import { freePort } from '@trainyard/servers';
import { tempDir, waitFor } from '@trainyard/testkit';
import { addUser, startTestStack, submit, type TestStack } from './harness.ts';
import {
  connect,
  registeredKey,
  run,
  runningSession,
  SshClient,
  waitForSession,
  type SessionView,
} from './ssh.ts';

/** Interactive sessions through the gateway, with the real OpenSSH client. */
let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;
const tokens: Record<string, string> = {};
const PASSWORDS = { alice: 'lantern-river-stone-4', bob: 'copper-meadow-fern-5' };
let session: SessionView;
let client: SshClient;
let aliceKey: string;
let bobKey: string;

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

async function sessionEvents(id: string): Promise<StoredEvent<SessionEvent>[]> {
  const { events } = await t.stack.ctx.bus.store.load('session', id);
  return events;
}

beforeAll(async () => {
  t = await startTestStack({ checkEveryMs: 200 });
  work = await tempDir('trainyard-ssh-');
  const admin = await t.token();
  for (const [name, password] of Object.entries(PASSWORDS)) {
    tokens[name] = await addUser(t, admin, name, password);
  }
  session = await runningSession(t, tokens.alice!);
  client = await SshClient.forSession(work.path, await connect(t, tokens.alice!, session.id));
  aliceKey = await registeredKey(t, tokens.alice!, work.path, 'alice_key');
  bobKey = await registeredKey(t, tokens.bob!, work.path, 'bob_key');
}, 60_000);

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('logging in to a session', () => {
  it('takes a one-time password once, and runs commands as the session’s own user', async () => {
    const { password } = await connect(t, tokens.alice!, session.id);
    const first = await client.ssh('id -u; echo to-out; echo to-err >&2; exit 7', { password });
    expect(first.code).toBe(7);
    const [uid, out] = first.stdout.trim().split('\n');
    expect(Number(uid)).toBeGreaterThan(0);
    expect(out).toBe('to-out');
    expect(first.stderr).toContain('to-err');
    expect(first.stdout).not.toContain('to-err');
    // sshpass exits 5 when the password it typed is refused.
    const again = await client.ssh('true', { password });
    expect(again.code).toBe(5);
  });

  it('refuses a wrong password and records every login, accepted or not', async () => {
    const wrong = await client.ssh('true', { password: 'not-the-password' });
    expect(wrong.code).toBe(5);
    const logins = await waitFor('the refused login, recorded', async () => {
      const all = (await sessionEvents(session.id)).filter((e) => e.type === 'SessionLogin');
      return all.some((e) => e.data.reason === 'badPassword') ? all : undefined;
    });
    expect(logins.some((e) => e.data.accepted && e.data.user === 'alice')).toBe(true);
    expect(logins.some((e) => !e.data.accepted && e.data.reason === 'badPassword')).toBe(true);
  });

  it('logs in with a key the owner registered, and not with another user’s', async () => {
    const ok = await client.ssh('exit 3', { key: aliceKey });
    expect(ok.code).toBe(3);
    const other = await client.ssh('true', { key: bobKey });
    expect(other.code).toBe(255);
    // Offering a key proves nothing (anyone may hold anyone's public key): no login to record.
    const logins = (await sessionEvents(session.id)).filter((e) => e.type === 'SessionLogin');
    expect(logins.some((e) => e.data.user === 'bob')).toBe(false);
  });

  it('gives another user neither the session nor a password for it', async () => {
    const seen = await t.http(`/v1/sessions/${session.id}`, { token: tokens.bob! });
    expect(seen.status).toBe(404);
    const res = await t.http(`/v1/sessions/${session.id}/connect`, {
      method: 'POST',
      token: tokens.bob!,
    });
    expect(res.status).toBe(404);
  });
});

describe('channels', () => {
  it('gives a shell a terminal, which takes typed commands', async () => {
    const shell = client.spawn(['-tt'], aliceKey);
    let out = '';
    shell.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    shell.stdin!.write('tty; echo typed-$((6*7))\n');
    await waitFor('the typed command', () => (out.includes('typed-42') ? true : undefined), {
      timeoutMs: 15_000,
    });
    expect(out).toMatch(/\/dev\/pts\/\d+/);
    shell.stdin!.write('exit 5\n');
    const code = await new Promise((r) => shell.once('exit', r));
    expect(code).toBe(5);
  });

  it('round-trips 50 MB byte-identical through scp and sftp', async () => {
    const bytes = randomBytes(50 * 1024 * 1024);
    const file = join(work.path, 'blob.bin');
    await writeFile(file, bytes);
    const up = await client.scp(file, ':blob.bin', aliceKey);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    const inside = await client.ssh('sha256sum blob.bin', { key: aliceKey });
    expect(inside.stdout.split(' ')[0]).toBe(sha256(bytes));
    const back = join(work.path, 'back.bin');
    expect((await client.scp(':blob.bin', back, aliceKey)).code).toBe(0);
    expect(sha256(await readFile(back))).toBe(sha256(bytes));
    const viaSftp = join(work.path, 'sftp.bin');
    const batch = await client.sftp(
      [`put ${file} sftp-up.bin`, `get sftp-up.bin ${viaSftp}`, 'ls -l'],
      aliceKey,
    );
    expect(batch.code).toBe(0);
    expect(batch.stdout).toContain('sftp-up.bin');
    expect(sha256(await readFile(viaSftp))).toBe(sha256(bytes));
  }, 180_000);

  it('forwards ssh -L to a server listening inside the session', async () => {
    const inner = await freePort();
    const server = client.spawn(
      [],
      aliceKey,
      `exec python3 -m http.server ${inner} --bind 127.0.0.1`,
    );
    const local = await freePort();
    const forward = client.spawn(['-N', '-L', `${local}:localhost:${inner}`], aliceKey);
    try {
      const body = await waitFor(
        'the forwarded server',
        () =>
          new Promise<string | undefined>((resolve) => {
            const req = request({ host: '127.0.0.1', port: local, path: '/' }, (res) => {
              let text = '';
              res.on('data', (d: Buffer) => (text += d.toString()));
              res.on('end', () => resolve(res.statusCode === 200 ? text : undefined));
            });
            req.on('error', () => resolve(undefined));
            req.end();
          }),
        { timeoutMs: 20_000, intervalMs: 250 },
      );
      expect(body).toContain('Directory listing');
    } finally {
      forward.kill();
      server.kill();
    }
  });
});

describe('the end of a session', () => {
  it('closes live connections when the session is stopped', async () => {
    const own = await runningSession(t, tokens.alice!);
    const ownClient = await SshClient.forSession(
      work.path,
      await connect(t, tokens.alice!, own.id),
    );
    const live = ownClient.spawn([], aliceKey, 'sleep 300');
    const exited = new Promise<number | null>((r) => live.once('exit', (code) => r(code)));
    let stderr = '';
    live.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    await waitFor(
      'the login',
      async () =>
        (await sessionEvents(own.id)).some((e) => e.type === 'SessionLogin' && e.data.accepted)
          ? true
          : undefined,
      { timeoutMs: 15_000 },
    );
    const stopped = await t.http(`/v1/sessions/${own.id}/stop`, {
      method: 'POST',
      token: tokens.alice!,
    });
    expect(stopped.status).toBe(202);
    expect(await exited).not.toBe(0);
    expect(stderr).toContain('stopping');
    const end = await waitForSession(t, tokens.alice!, own.id, (s) => s.status === 'stopped');
    expect(end.stopReason).toBe('user');
    const refused = await ownClient.ssh('true', { key: aliceKey });
    expect(refused.code).toBe(255);
  });

  it('stops a session no one connects to, saying why', async () => {
    const res = await t.http('/v1/sessions', {
      method: 'POST',
      token: tokens.alice!,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ resources: { gpus: 0 }, timers: { connectMin: 0.05 } }),
    });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const end = await waitForSession(t, tokens.alice!, id, (s) => s.status === 'stopped', 30_000);
    expect(end.stopReason).toBe('neverConnected');
  });

  it('stops an idle session once its last channel has been closed long enough', async () => {
    const res = await t.http('/v1/sessions', {
      method: 'POST',
      token: tokens.alice!,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ resources: { gpus: 0 }, timers: { idleMin: 0.05 } }),
    });
    const { id } = (await res.json()) as { id: string };
    await waitForSession(t, tokens.alice!, id, (s) => s.status === 'running');
    const idleClient = await SshClient.forSession(work.path, await connect(t, tokens.alice!, id));
    expect((await idleClient.ssh('sleep 4', { key: aliceKey })).code).toBe(0);
    const events = await sessionEvents(id);
    // It ran four seconds with a channel open: the idle timer (3 s) had not counted them.
    expect(events.find((e) => e.type === 'SessionStopRequested')).toBeUndefined();
    const end = await waitForSession(t, tokens.alice!, id, (s) => s.status === 'stopped', 30_000);
    expect(end.stopReason).toBe('idle');
  });
});

describe('a shell beside a running job', () => {
  it('opens where the job runs, as its user, for its owner alone; records logins; ends with it, taking all its user ran', async () => {
    const res = await submit(t, tokens.alice!, {
      name: 'beside',
      command: 'id -u > uid.txt; echo from-the-job > marker.txt; exec sleep 300',
      resources: { gpus: 0 },
      maxRetries: 0,
    });
    const { id } = (await res.json()) as { id: string };
    const connectJob = (token: string) =>
      t.http(`/v1/jobs/${id}/connect`, { method: 'POST', token });
    await t.waitForJob(id, tokens.alice!, (j) => j.status === 'running');
    expect((await connectJob(tokens.bob!)).status).toBe(404);
    const answer = await connectJob(tokens.alice!);
    expect(answer.status).toBe(200);
    const info = (await answer.json()) as Awaited<ReturnType<typeof connect>>;
    expect(info.username).toBe(id);
    const beside = await SshClient.forSession(work.path, info);

    const seen = await waitFor('the job to have written its files', async () => {
      const r = await beside.ssh('cat marker.txt uid.txt && id -u && echo "$TRAINYARD_JOB_ID"', {
        key: aliceKey,
      });
      return r.code === 0 ? r : undefined;
    });
    const [marker, jobUid, shellUid, jobId] = seen.stdout.trim().split('\n');
    expect(marker).toBe('from-the-job');
    expect(shellUid).toBe(jobUid);
    expect(Number(shellUid)).toBeGreaterThan(0);
    expect(jobId).toBe(id);
    const byPassword = await beside.ssh('exit 6', { password: info.password });
    expect(byPassword.code).toBe(6);
    expect((await beside.ssh('true', { key: bobKey })).code).toBe(255);
    expect((await beside.ssh('true', { password: info.password })).code).toBe(5);
    const logins = await waitFor('the logins, recorded on the job', async () => {
      const { events } = await t.stack.ctx.bus.store.load('job', id);
      const all = events.filter((e) => e.type === 'JobLogin');
      return all.some((e) => e.data.reason === 'passwordUsed' || e.data.reason === 'badPassword')
        ? all
        : undefined;
    });
    const accepted = logins.filter((e) => e.data.accepted);
    expect(accepted.map((e) => [e.data.user, e.data.method])).toEqual(
      expect.arrayContaining([
        ['alice', 'publickey'],
        ['alice', 'password'],
      ]),
    );
    expect(logins.some((e) => e.data.user === 'bob')).toBe(false);

    // A process that left the shell's process group and session still ends with the job.
    const left = await beside.ssh('setsid sleep 600 < /dev/null > /dev/null 2>&1 & echo started', {
      key: aliceKey,
    });
    expect(left.stdout).toContain('started');
    const open = beside.spawn([], aliceKey, 'sleep 600');
    const closed = new Promise<number | null>((r) => open.once('exit', r));
    await waitFor('the long shell to be open', async () => {
      const r = await run('pgrep', ['-u', jobUid!, '-f', 'sleep 600']);
      return r.stdout.trim().split('\n').length >= 2 ? true : undefined;
    });
    const cancelled = await t.http(`/v1/jobs/${id}/cancel`, {
      method: 'POST',
      token: tokens.alice!,
    });
    expect(cancelled.status).toBe(202);
    expect(await closed).not.toBe(0);
    await t.waitForJob(id, tokens.alice!, (j) => j.status === 'cancelled');
    await waitFor('nothing of the job’s user left', async () => {
      const r = await run('pgrep', ['-u', jobUid!]);
      return r.code === 1 ? true : undefined;
    });
    expect((await beside.ssh('true', { key: aliceKey })).code).toBe(255);
    expect((await connectJob(tokens.alice!)).status).toBe(409);
  });
});

describe('a disabled account', () => {
  it('loses its live connections at once, and logs in no more', async () => {
    const own = await runningSession(t, tokens.bob!);
    const ownClient = await SshClient.forSession(work.path, await connect(t, tokens.bob!, own.id));
    const live = ownClient.spawn([], bobKey, 'sleep 300');
    const exited = new Promise<number | null>((r) => live.once('exit', (code) => r(code)));
    let stderr = '';
    live.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    await waitFor('the login', async () =>
      (await sessionEvents(own.id)).some((e) => e.type === 'SessionLogin' && e.data.accepted)
        ? true
        : undefined,
    );
    const disabled = await t.http('/v1/users/bob/disable', {
      method: 'POST',
      token: await t.token(),
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'left the team' }),
    });
    expect(disabled.status).toBe(200);
    expect(await exited).not.toBe(0);
    expect(stderr).toContain('your account was disabled');
    expect((await ownClient.ssh('true', { key: bobKey })).code).toBe(255);
  });
});
