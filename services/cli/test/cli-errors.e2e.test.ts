import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TokenIssuer } from '@trainyard/api';
import { freePort } from '@trainyard/platform';
import { tempDir, waitFor } from '@trainyard/testkit';
import { ADMIN_PASSWORD, codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { BIN } from './processes.ts';

const SECRET = 'cli-errors-secret-0123456789abcdef';
let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;

type Run = { code: number; stdout: string; stderr: string };

/** The CLI with a private config and state, and nothing pointing it at the test stack. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<Run> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !k.startsWith('TRAINYARD_') && k !== 'DATABASE_URL',
    ),
  );
  return new Promise((done) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      {
        timeout: timeoutMs,
        cwd: work.path,
        env: {
          ...clean,
          XDG_CONFIG_HOME: join(work.path, 'config'),
          XDG_STATE_HOME: join(work.path, 'state'),
          TRAINYARD_HOME: join(work.path, 'home'),
          TRAINYARD_LOG_LEVEL: 'error',
          ...env,
        },
      },
      (err, stdout, stderr) =>
        done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
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
    const tls = await cli(['ls', '--api', t.url.replace('http:', 'https:')]);
    expectPlainFailure(tls, t.url.replace('http:', 'https:'));
    expect(tls.stderr).toMatch(/TLS/);
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

  it('tells a missing login from a bad or an expired one', async () => {
    expectPlainFailure(
      await cli(['ls', '--api', t.url]),
      `not logged in to ${t.url}: run \`trainyard login --api ${t.url}\``,
    );
    expectPlainFailure(
      await cli(['ls', '--api', t.url], { TRAINYARD_TOKEN: 'not.a.token' }),
      'does not accept your saved login',
    );
    const expired = await new TokenIssuer(SECRET, -60).issue({ username: 'admin', role: 'admin' });
    expectPlainFailure(
      await cli(['ls', '--api', t.url], { TRAINYARD_TOKEN: expired }),
      `your login to ${t.url} has expired`,
    );
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

  it('says how to point an operator command at a stack when none runs', async () => {
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
