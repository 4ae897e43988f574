import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TokenIssuer } from '@trainyard/api';
import { freePort } from '@trainyard/servers';
import { startTestNats, tempDir, waitFor } from '@trainyard/testkit';
import { ADMIN_PASSWORD, codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { BIN, runCli, type Run } from './processes.ts';

const SECRET = 'cli-errors-secret-0123456789abcdef';
let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;

/** The CLI with a private config and state, and nothing pointing it at the test stack. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<Run> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !k.startsWith('TRAINYARD_') && k !== 'DATABASE_URL',
    ),
  );
  return runCli(args, {
    timeoutMs,
    cwd: work.path,
    env: {
      ...clean,
      XDG_CONFIG_HOME: join(work.path, 'config'),
      XDG_STATE_HOME: join(work.path, 'state'),
      TRAINYARD_HOME: join(work.path, 'home'),
      TRAINYARD_LOG_LEVEL: 'error',
      ...env,
    },
  });
}

/** A failure as a person should meet it: a non-zero exit, one `error:` line, no stack. */
function expectPlainFailure(r: Run, ...words: string[]) {
  expect(r.code, r.stdout).not.toBe(0);
  expect(r.stderr).toMatch(/^error: /);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  for (const w of words) expect(r.stderr).toContain(w);
}

function listen(server: Server | HttpServer): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)),
  );
}

beforeAll(async () => {
  t = await startTestStack({ jwtSecret: SECRET, maxUploadBytes: 64 * 1024 });
  work = await tempDir('trainyard-cli-errors-');
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('trainyard up, when it cannot start', () => {
  it('names a port that is taken and the variable that moves it', async () => {
    const holder = createServer();
    const port = await listen(holder);
    try {
      const api = await cli(['up', '--no-worker'], { TRAINYARD_PORT: String(port) });
      expectPlainFailure(api, `port ${port} is already in use`, 'TRAINYARD_PORT');
      const nats = await cli(['up', '--no-worker'], {
        TRAINYARD_PORT: String(await freePort()),
        TRAINYARD_NATS_PORT: String(port),
      });
      expectPlainFailure(nats, `port ${port} is already in use`, 'TRAINYARD_NATS_PORT');
    } finally {
      holder.close();
    }
  });

  it('names a DATABASE_URL or a NATS URL that refuses, and why', async () => {
    const closed = await freePort();
    const db = await cli(['up', '--no-worker'], {
      TRAINYARD_PORT: String(await freePort()),
      TRAINYARD_NATS_URL: t.natsUrl,
      DATABASE_URL: `postgres://trainyard:hunter2@127.0.0.1:${closed}/trainyard`,
    });
    expectPlainFailure(
      db,
      `cannot connect to PostgreSQL at postgres://trainyard:***@127.0.0.1:${closed}/trainyard (DATABASE_URL): connection refused`,
    );
    expect(db.stderr).not.toContain('hunter2');
    const nats = await cli(['up', '--no-worker'], {
      TRAINYARD_PORT: String(await freePort()),
      TRAINYARD_NATS_URL: `nats://127.0.0.1:${closed}`,
      DATABASE_URL: inject('pgUrl'),
    });
    expectPlainFailure(
      nats,
      `cannot connect to NATS at nats://127.0.0.1:${closed} (TRAINYARD_NATS_URL): connection refused`,
    );
  });
});

describe('up --listen', () => {
  it('takes an address of this host, not a name, and TLS as a certificate with its key', async () => {
    const named = await cli(['up', '--listen', 'yard.example.com']);
    expectPlainFailure(named, '--listen takes an address of this host', 'yard.example.com');
    const half = await cli(['up', '--listen', '0.0.0.0', '--tls-cert', join(work.path, 'c.pem')]);
    expectPlainFailure(half, 'give both --tls-cert and --tls-key');
  });
});

describe('a worker that cannot join', () => {
  it('is told to enrol when it has no key, and that a NATS holds no Trainyard', async () => {
    const noKey = await cli(['worker', '--name', 'gpu-q', '--api', 'http://127.0.0.1:1']);
    expectPlainFailure(noKey, 'worker gpu-q has no key yet', 'trainyard worker token create gpu-q');
    const bare = await startTestNats();
    try {
      const elsewhere = await cli(['worker', '--name', 'gpu-q', '--cpu-slots', '1'], {
        TRAINYARD_NATS_URL: bare.url,
      });
      expectPlainFailure(elsewhere, 'holds no Trainyard streams', '--token');
    } finally {
      await bare.stop();
    }
  });
});

describe('nats auth, when it is not given what it needs', () => {
  it('names the missing setting, and a seed that is no account seed', async () => {
    const none = await cli(['nats', 'auth']);
    expectPlainFailure(none, 'TRAINYARD_AUTH_NATS_URL is not set');
    const urls = {
      TRAINYARD_AUTH_NATS_URL: 'nats://auth:x@127.0.0.1:1',
      TRAINYARD_SYS_NATS_URL: 'nats://sys:x@127.0.0.1:1',
    };
    const noSeed = await cli(['nats', 'auth'], urls);
    expectPlainFailure(noSeed, 'TRAINYARD_AUTH_ISSUER_SEED is not set', 'trainyard nats issuer');
    const bad = await cli(['nats', 'auth'], {
      ...urls,
      TRAINYARD_AUTH_ISSUER_SEED: 'SUNOTANACCOUNT',
    });
    expectPlainFailure(bad, 'is no account nkey seed', 'trainyard nats issuer');
  });
});

describe('the CLI, when it cannot reach the API or is not let in', () => {
  it('says which URL it tried and why: refused, DNS, TLS, or not a Trainyard API', async () => {
    const closed = await freePort();
    expectPlainFailure(
      await cli(['ls', '--api', `http://127.0.0.1:${closed}`]),
      `cannot reach the Trainyard API at http://127.0.0.1:${closed}: connection refused`,
      'npm run up',
    );
    expectPlainFailure(
      await cli(['ls', '--api', 'http://trainyard.invalid:8080']),
      'http://trainyard.invalid:8080',
      'could not be resolved (DNS)',
    );
    expectPlainFailure(
      await cli(['ls', '--api', t.url.replace('http:', 'https:')]),
      'the server answered in plain HTTP, not TLS: use http:// rather than https://',
    );
    expectPlainFailure(
      await cli(['ls', '--api', t.url.replace('http://', '')]),
      'the API URL must look like http://host:port',
    );
    expectPlainFailure(
      await cli(['ls', '--api', 'http://127.0.0.1:6000']),
      'fetch refuses to connect to port 6000',
    );
    expect((await cli(['ls', '--api', 'http://trainyard.invalid:8080'])).stderr).not.toContain(
      'npm run up',
    );
    const other = createHttpServer((_req, res) => res.writeHead(404).end('<html>nope</html>'));
    const port = await listen(other);
    try {
      expectPlainFailure(
        await cli(['ls', '--api', `http://127.0.0.1:${port}`]),
        'answered HTTP 404',
        'is it the Trainyard API?',
      );
    } finally {
      other.close();
    }
  });

  it('tells a missing login from a bad or an expired TRAINYARD_TOKEN, naming it', async () => {
    expectPlainFailure(
      await cli(['ls', '--api', t.url]),
      `not logged in to ${t.url}: run \`trainyard login --api ${t.url}\``,
    );
    expectPlainFailure(
      await cli(['ls', '--api', t.url], { TRAINYARD_TOKEN: 'not.a.token' }),
      'does not accept the token in TRAINYARD_TOKEN',
    );
    const expired = await new TokenIssuer(SECRET, -60).issue({ username: 'admin', role: 'admin' });
    expectPlainFailure(
      await cli(['ls', '--api', t.url], { TRAINYARD_TOKEN: expired }),
      'does not accept the token in TRAINYARD_TOKEN (the token has expired',
    );
    expectPlainFailure(
      await cli(['ls', '--api', t.url], { TRAINYARD_TOKEN: 'a\u0001b' }),
      'the token in TRAINYARD_TOKEN holds characters no HTTP header may carry',
    );
  });

  it('sends a saved login only to the server it was made for', async () => {
    const login = await cli(['login', '--api', t.url, '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(login.code, login.stderr).toBe(0);
    const seen: (string | undefined)[] = [];
    const other = createHttpServer((req, res) => {
      seen.push(req.headers.authorization);
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'UNAUTHENTICATED', message: 'who are you' } }));
    });
    const port = await listen(other);
    try {
      const r = await cli(['ls', '--api', `http://127.0.0.1:${port}`]);
      expectPlainFailure(r, `your saved login is for ${t.url}`);
      expect(seen).toEqual([undefined]);
    } finally {
      other.close();
    }
    expect((await cli(['ls'], { TRAINYARD_TOKEN: '' })).code).toBe(0);
  });

  it('refreshes a saved login that has expired, and keeps the new one', async () => {
    const file = join(work.path, 'config', 'trainyard', 'credentials.json');
    const read = async () =>
      JSON.parse(await readFile(file, 'utf8')) as {
        profiles: { default: { token: string; refreshToken: string; expiresAt: string } };
      };
    const before = (await read()).profiles.default;
    const stale = { ...before, expiresAt: new Date(Date.now() - 1000).toISOString() };
    await writeFile(file, JSON.stringify({ profiles: { default: stale } }));
    expect((await cli(['ls'])).code).toBe(0);
    const after = (await read()).profiles.default;
    expect(after.token).not.toBe(before.token);
    expect(after.refreshToken).not.toBe(before.refreshToken);
    expect(Date.parse(after.expiresAt)).toBeGreaterThan(Date.now());
    const reused = await t.http('/v1/auth/refresh', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ refreshToken: before.refreshToken }),
    });
    expect(reused.status).toBe(401);
  });

  it('ends the session at the server on logout: a copied token stops working', async () => {
    const login = await cli(['login', '--api', t.url, '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(login.code).toBe(0);
    const file = join(work.path, 'config', 'trainyard', 'credentials.json');
    const { token } = (
      JSON.parse(await readFile(file, 'utf8')) as { profiles: { default: { token: string } } }
    ).profiles.default;
    expect((await cli(['logout'])).stdout).toContain('logged out of');
    const copied = await cli(['ls', '--api', t.url], { TRAINYARD_TOKEN: token });
    expectPlainFailure(copied, 'the token was revoked');
  });

  it('prints the code and message of an API error, and the stack only with --verbose', async () => {
    const login = await cli(['login', '--api', t.url, '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(login.code, login.stderr).toBe(0);
    const missing = await cli(['status', 'job_nope']);
    expectPlainFailure(missing, 'job job_nope not found (NOT_FOUND)');
    const verbose = await cli(['status', 'job_nope', '--verbose']);
    expect(verbose.code).not.toBe(0);
    expect(verbose.stderr).toMatch(/^\s+at /m);
    const debug = await cli(['status', 'job_nope'], { TRAINYARD_DEBUG: '1' });
    expect(debug.stderr).toMatch(/^\s+at /m);
  });

  it("refuses an archive over the server's limit before uploading it", async () => {
    const dir = join(work.path, 'big');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'weights.bin'), randomBytes(200 * 1024));
    const before = await t.stack.ctx.bus.store.lastSeq();
    const r = await cli(['submit', dir, '--command', 'true']);
    expectPlainFailure(r, "over this server's limit of 64.0 KiB", '.trainyardignore');
    expect(r.stderr).not.toContain('uploading');
    expect(await t.stack.ctx.bus.store.lastSeq()).toBe(before);
  });

  it('checks the flags of a submit before it uploads anything, naming the flag', async () => {
    const dir = join(work.path, 'small');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'run.sh'), 'true\n');
    for (const [flags, words] of [
      [['--gpus', '-1'], '--gpus: '],
      [['--gpus', '1.5'], '--gpus: '],
      [['--max-retries', '-3'], '--max-retries: '],
      [['--name', 'x\u202Ey'], '--name: control and bidirectional characters'],
    ] as const) {
      const r = await cli(['submit', dir, '--command', 'sh run.sh', ...flags]);
      expectPlainFailure(r, words);
      expect(r.stderr).not.toContain('uploading');
    }
  });

  it('asks for a password without showing it, and says how to give one without a terminal', async () => {
    const piped = await cli(['login', '-u', 'admin']);
    expectPlainFailure(
      piped,
      'the password is required: pass -p PASSWORD, or set TRAINYARD_PASSWORD',
    );
    const secret = ADMIN_PASSWORD;
    const child = spawn(
      'script',
      ['-qfec', `${process.execPath} ${BIN} login --api ${t.url} -u admin`, '/dev/null'],
      {
        cwd: work.path,
        env: { ...process.env, XDG_CONFIG_HOME: join(work.path, 'config-tty') },
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let seen = '';
    child.stdout.on('data', (c: Buffer) => (seen += c.toString()));
    child.stderr.on('data', (c: Buffer) => (seen += c.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', r));
    await waitFor('the password prompt', () => seen.includes('password: '), { timeoutMs: 20_000 });
    child.stdin.write(`${secret}\r`);
    expect(await exited).toBe(0);
    expect(seen).toContain('logged in to');
    expect(seen).not.toContain(secret);
  });

  it('refuses a second up from the same state directory, naming the running one', async () => {
    const home = join(work.path, 'shared-home');
    const first = spawn(process.execPath, [BIN, 'up', '--no-worker'], {
      cwd: work.path,
      detached: true,
      env: {
        ...process.env,
        TRAINYARD_HOME: home,
        XDG_STATE_HOME: join(work.path, 'state'),
        TRAINYARD_PORT: '0',
        TRAINYARD_NATS_URL: t.natsUrl,
        DATABASE_URL: inject('pgUrl'),
        TRAINYARD_ADMIN_PASSWORD: ADMIN_PASSWORD,
        TRAINYARD_LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    first.stdout.on('data', (c: Buffer) => (out += c.toString()));
    first.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const exited = new Promise<void>((r) => first.once('exit', () => r()));
    try {
      await Promise.race([
        waitFor('the first up', () => out.includes('Trainyard is up.'), {
          timeoutMs: 50_000,
        }).catch((e: Error) => {
          throw new Error(`${e.message}:\n${out}\n${err}`);
        }),
        exited.then(() => {
          throw new Error(`the first up ended before it was up:\n${out}\n${err}`);
        }),
      ]);
      const second = await cli(['up', '--no-worker'], {
        TRAINYARD_HOME: home,
        TRAINYARD_PORT: String(await freePort()),
        TRAINYARD_NATS_PORT: String(await freePort()),
      });
      expectPlainFailure(second, `a Trainyard is already running from ${home} (pid ${first.pid})`);
    } finally {
      process.kill(-first.pid!, 'SIGINT');
      await exited;
    }
    expect(out).toContain('Trainyard stopped.');
  });

  it('says how to point an operator command at a stack when none runs', async () => {
    expectPlainFailure(
      await cli(['events', 'verify', '--api', t.url]),
      'reads the event log through NATS, not the API, so --api does not apply',
    );
    expectPlainFailure(
      await cli(['events', 'verify']),
      'no running Trainyard found',
      'TRAINYARD_NATS_URL',
    );
    expectPlainFailure(
      await cli(['projections', 'rebuild'], { TRAINYARD_NATS_URL: t.natsUrl }),
      'DATABASE_URL is not set',
    );
  });
});

/** A TCP relay to the API whose connections the test can cut. */
async function relay(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  const at = await listen(server);
  return {
    url: `http://127.0.0.1:${at}`,
    cut: () => {
      for (const s of sockets) s.destroy();
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('logs -f over a connection that drops', () => {
  it('opens the stream again where it broke off, printing every line once', async () => {
    const code = await codeArchive({
      'count.sh': 'for i in $(seq 1 30); do echo "line $i"; sleep 0.1; done\n',
    });
    const job = await submit(
      t,
      await t.token(),
      {
        name: 'count',
        command: 'sh count.sh',
        resources: { gpus: 0 },
      },
      code,
    );
    const { id } = (await job.json()) as { id: string };
    const proxy = await relay(t.url);
    try {
      const child = spawn(process.execPath, [BIN, 'logs', id, '-f', '--api', proxy.url], {
        cwd: work.path,
        env: {
          ...process.env,
          XDG_CONFIG_HOME: join(work.path, 'config'),
          TRAINYARD_API_URL: '',
          TRAINYARD_TOKEN: await t.token(),
        },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const exited = new Promise<number | null>((r) => child.once('exit', r));
      await waitFor('the first lines', () => stdout.includes('line 5\n'), { timeoutMs: 30_000 });
      proxy.cut();
      await waitFor('more lines after the cut', () => stdout.includes('line 12\n'), {
        timeoutMs: 30_000,
      });
      proxy.cut();
      expect(await exited).toBe(0);
      const lines = stdout.split('\n').filter((l) => l.startsWith('line '));
      expect(lines).toEqual(Array.from({ length: 30 }, (_, i) => `line ${i + 1}`));
      expect(stdout.match(/--- attempt 1 /g)).toHaveLength(1);
      expect(stderr).toContain('reconnecting');
      expect(stderr).toContain(`job ${id} succeeded (exit 0)`);
    } finally {
      proxy.cut();
      await proxy.close();
    }
  });
});
