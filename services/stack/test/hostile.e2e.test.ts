import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestNats } from '@trainyard/testkit';
import { startTestStack, submit, type Job, type TestStack } from './harness.ts';

let t: TestStack;
let admin: string;
let alice: string;

const cpuSpec = (over: object = {}) => ({
  name: 'hostile',
  command: 'true',
  resources: { gpus: 0 },
  ...over,
});

async function refused(res: Response, status: number, code: string, words: string) {
  expect(res.status).toBe(status);
  const body = (await res.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe(code);
  expect(body.error.message).toContain(words);
}

beforeAll(async () => {
  t = await startTestStack();
  admin = await t.token();
  const res = await t.http('/v1/users', {
    method: 'POST',
    token: admin,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'alice', password: 'wonderland-rabbit-7', role: 'user' }),
  });
  expect(res.status).toBe(201);
  alice = await t.token('alice', 'wonderland-rabbit-7');
});

afterAll(async () => t?.stop());

describe('a hostile spec', () => {
  it('may not hide control or bidirectional characters in a job name', async () => {
    for (const name of [
      'ok\x1b[2Jcleared',
      'invoice\u202Egpj.exe',
      'two\nlines',
      'zero\u200Bwidth',
    ]) {
      await refused(
        await submit(t, alice, cpuSpec({ name })),
        400,
        'VALIDATION_FAILED',
        'control and bidirectional characters are not allowed',
      );
    }
  });

  it('may not raise its priority above the default unless an admin sends it', async () => {
    await refused(await submit(t, alice, cpuSpec({ priority: 1000 })), 403, 'FORBIDDEN', 'admin');
    expect((await submit(t, alice, cpuSpec({ priority: -5 }))).status).toBe(202);
    expect((await submit(t, admin, cpuSpec({ priority: 1000 }))).status).toBe(202);
  });

  it('may not carry an environment larger than the cap, in count or in bytes, or name the variables of Trainyard’s shells', async () => {
    await refused(
      await submit(t, alice, cpuSpec({ env: { __ty_stopped: '1' } })),
      400,
      'VALIDATION_FAILED',
      "names beginning with __ty_ are Trainyard's own",
    );
    const many = Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`V${i}`, 'x']));
    await refused(
      await submit(t, alice, cpuSpec({ env: many })),
      400,
      'VALIDATION_FAILED',
      '257 variables',
    );
    const big = Object.fromEntries(
      Array.from({ length: 58 }, (_, i) => [`BIG${i}`, 'x'.repeat(16 * 1024)]),
    );
    await refused(
      await submit(t, alice, cpuSpec({ env: big })),
      400,
      'VALIDATION_FAILED',
      'bytes in all',
    );
  });

  it('does not learn where the workers run; an admin does', async () => {
    const mine = (await (await t.http('/v1/workers', { token: alice })).json()) as {
      hostname: string | null;
    }[];
    expect(mine.every((w) => w.hostname === null)).toBe(true);
    const theirs = (await (await t.http('/v1/workers', { token: admin })).json()) as {
      hostname: string | null;
    }[];
    expect(theirs.every((w) => typeof w.hostname === 'string' && w.hostname.length > 0)).toBe(true);
  });

  it('is refused a user it may not create before its body is even read', async () => {
    const res = await t.http('/v1/users', {
      method: 'POST',
      token: alice,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'x', password: 'short' }),
    });
    await refused(res, 403, 'FORBIDDEN', 'admins only');
  });
});

describe('a job whose spec is near the message limit', () => {
  it('runs: its dispatch names the job and carries the spec once, not its state', async () => {
    const nats = await startTestNats({ config: 'max_payload: 98304\n' });
    const small = await startTestStack({ natsUrl: nats.url });
    try {
      const token = await small.token();
      const env = { DATA: 'x'.repeat(60 * 1024) };
      const res = await submit(small, token, cpuSpec({ env, command: 'echo "got ${#DATA}"' }));
      expect(res.status).toBe(202);
      const { id } = (await res.json()) as { id: string };
      const job: Job = await small.waitForJob(id, token, (j) =>
        ['succeeded', 'failed', 'cancelled'].includes(j.status),
      );
      expect(job.status).toBe('succeeded');
      const logs = await (await small.http(`/v1/jobs/${id}/logs`, { token })).text();
      expect(logs).toContain(`got ${60 * 1024}`);
    } finally {
      await small.stop();
      await nats.stop();
    }
  });
});

const json = (body: unknown) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
});

describe('logins and sessions under attack', () => {
  it('throttles failed logins per user: past the limit even the right password waits', async () => {
    await t.http('/v1/users', {
      ...json({ username: 'target', password: 'many-guesses-later-9', role: 'user' }),
      token: admin,
    });
    for (let i = 0; i < 10; i++) {
      const res = await t.http(
        '/v1/auth/login',
        json({ username: 'target', password: `guess-${i}` }),
      );
      expect(res.status).toBe(401);
    }
    const blocked = await t.http(
      '/v1/auth/login',
      json({ username: 'target', password: 'many-guesses-later-9' }),
    );
    await refused(blocked, 429, 'TOO_MANY_LOGIN_ATTEMPTS', 'too many failed logins');
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(
      (await t.http('/v1/auth/login', json({ username: 'alice', password: 'wonderland-rabbit-7' })))
        .status,
    ).toBe(200);
  });

  it('refuses weak passwords, naming why', async () => {
    for (const [password, why] of [
      ['short-1', 'at least 12 characters'],
      ['weak-user-password', 'may not contain the username'],
      ['aaaaaaaaaaaaaaaa', 'at least 4 different characters'],
      ['Password123456', 'most common passwords'],
    ] as const) {
      const res = await t.http('/v1/users', {
        ...json({ username: 'weak-user', password, role: 'user' }),
        token: admin,
      });
      await refused(res, 400, 'VALIDATION_FAILED', why);
    }
  });

  it('ends every session of a user whose password changes, and of one an admin disables', async () => {
    await t.http('/v1/users', {
      ...json({ username: 'carol', password: 'first-secret-of-c1', role: 'user' }),
      token: admin,
    });
    const login = async (password: string) =>
      (await (await t.http('/v1/auth/login', json({ username: 'carol', password }))).json()) as {
        token: string;
        refreshToken: string;
      };
    const first = await login('first-secret-of-c1');
    const other = await login('first-secret-of-c1');
    const changed = await t.http('/v1/me/password', {
      ...json({ currentPassword: 'first-secret-of-c1', newPassword: 'second-secret-of-c2' }),
      token: first.token,
    });
    expect(changed.status).toBe(204);
    await refused(
      await t.http('/v1/jobs', { token: other.token }),
      401,
      'TOKEN_REVOKED',
      'revoked',
    );
    expect(
      (await t.http('/v1/auth/refresh', json({ refreshToken: other.refreshToken }))).status,
    ).toBe(401);
    const second = await login('second-secret-of-c2');
    expect((await t.http('/v1/jobs', { token: second.token })).status).toBe(200);

    const disabled = await t.http('/v1/users/carol/disable', { ...json({}), token: admin });
    expect(disabled.status).toBe(200);
    await refused(
      await t.http('/v1/jobs', { token: second.token }),
      401,
      'TOKEN_REVOKED',
      'revoked',
    );
    await refused(
      await t.http('/v1/auth/login', json({ username: 'carol', password: 'second-secret-of-c2' })),
      403,
      'ACCOUNT_DISABLED',
      'disabled',
    );
    const users = (await (await t.http('/v1/users', { token: admin })).json()) as {
      username: string;
      disabled: boolean;
    }[];
    expect(users.find((u) => u.username === 'carol')?.disabled).toBe(true);
    await refused(
      await t.http('/v1/users/carol/disable', { ...json({}), token: alice }),
      403,
      'FORBIDDEN',
      'admins only',
    );
  });

  it('ends a session whose refresh token is used twice', async () => {
    const { refreshToken } = (await (
      await t.http('/v1/auth/login', json({ username: 'alice', password: 'wonderland-rabbit-7' }))
    ).json()) as { refreshToken: string };
    const next = (await (await t.http('/v1/auth/refresh', json({ refreshToken }))).json()) as {
      token: string;
      refreshToken: string;
    };
    expect((await t.http('/v1/jobs', { token: next.token })).status).toBe(200);
    expect((await t.http('/v1/auth/refresh', json({ refreshToken }))).status).toBe(401);
    await refused(await t.http('/v1/jobs', { token: next.token }), 401, 'TOKEN_REVOKED', 'revoked');
    expect(
      (await t.http('/v1/auth/refresh', json({ refreshToken: next.refreshToken }))).status,
    ).toBe(401);
  });
});
