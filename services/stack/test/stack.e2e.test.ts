import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { pidsMatching, processAlive, processInfo, tempDir, waitFor } from '@trainyard/testkit';
import { startStack } from '../src/stack.ts';
import { BIN } from './processes.ts';

/** Live processes whose command line names `text`. */
function processesNaming(text: string): number[] {
  return pidsMatching(text).filter(processAlive);
}

let home: Awaited<ReturnType<typeof tempDir>>;
let taken: Server;
beforeAll(async () => {
  home = await tempDir('trainyard-stack-');
  taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  taken.close();
  await home.remove();
});

describe('an embedded stack that cannot start', () => {
  it('stops the servers and services it had started before passing the error on', async () => {
    const port = (taken.address() as { port: number }).port;
    await expect(
      startStack({
        home: home.path,
        natsPort: 0,
        apiPort: port,
        apiHost: '127.0.0.1',
        adminPassword: 'stack-keeper-pass',
        worker: null,
        fastPostgres: true,
      }),
    ).rejects.toThrow(/EADDRINUSE/);
    expect(existsSync(join(home.path, 'postgres', 'postgres.log'))).toBe(true);
    await waitFor(
      'its NATS and PostgreSQL to be gone',
      () => processesNaming(home.path).length === 0,
      {
        timeoutMs: 10_000,
      },
    );
  });

  it('fails at once, saying why, on an admin password it refuses', async () => {
    const own = await tempDir('trainyard-stack-weak-');
    try {
      await expect(
        startStack({
          home: own.path,
          natsPort: 0,
          apiPort: 0,
          apiHost: '127.0.0.1',
          adminPassword: 'admin-pass-123',
          worker: null,
          fastPostgres: true,
        }),
      ).rejects.toThrow(/TRAINYARD_ADMIN_PASSWORD is refused: it may not contain the username/);
      await waitFor(
        'its NATS and PostgreSQL to be gone',
        () => processesNaming(own.path).length === 0,
        {
          timeoutMs: 10_000,
        },
      );
    } finally {
      await own.remove();
    }
  });
});

describe('trainyard up', () => {
  it('stops in order on a Ctrl-C at the terminal, which signals its whole process group', async () => {
    // Its NATS and PostgreSQL run in process groups of their own, so the signal reaches `up`
    // alone, which stops its services (a job queued: the scheduler writes a last snapshot)
    // before their servers.
    const upHome = await tempDir('trainyard-up-');
    let pid: number | undefined;
    let pgDir: string | null = null;
    const serversOf = () => [
      ...processesNaming(upHome.path),
      ...(pgDir ? processesNaming(pgDir) : []),
    ];
    try {
      const child = spawn(process.execPath, [BIN, 'up', '--no-worker'], {
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          TRAINYARD_HOME: upHome.path,
          XDG_STATE_HOME: upHome.path,
          TRAINYARD_PORT: '0',
          TRAINYARD_ADMIN_PASSWORD: 'up-keeper-pass-1',
          TRAINYARD_LOG_LEVEL: 'warn',
        },
      });
      pid = child.pid;
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      await waitFor('the stack to be up', () => stdout.includes('Trainyard is up.'), {
        timeoutMs: 60_000,
      });
      const api = /API\s+(http:\/\/\S+)/.exec(stdout)![1]!;
      pgDir = /postgres\s+data in (\S+)/.exec(stdout)?.[1] ?? null;
      const login = await fetch(`${api}/v1/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ username: 'admin', password: 'up-keeper-pass-1' }),
      });
      const { token } = (await login.json()) as { token: string };
      const queued = await fetch(`${api}/v1/jobs`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'waits', command: 'true', resources: { gpus: 0 } }),
      });
      expect(queued.status).toBe(202);
      const servers = serversOf();
      expect(servers.length).toBeGreaterThanOrEqual(2);
      expect(servers.map((pid) => processInfo(pid)?.group)).not.toContain(child.pid);
      process.kill(-child.pid!, 'SIGINT');
      expect(await exited).toBe(0);
      expect(stderr).not.toMatch(/"level":50|projection batch failed/);
      expect(serversOf()).toEqual([]);
    } finally {
      for (const left of [...(pid ? [-pid] : []), ...serversOf()]) {
        try {
          process.kill(left, 'SIGKILL');
        } catch {
          continue;
        }
      }
      await upHome.remove();
      if (pgDir) await rm(pgDir, { recursive: true, force: true });
    }
  });
});

describe('the logs of trainyard up', () => {
  /** Runs `up` until it is up, then Ctrl-C; returns all it printed. */
  async function upOnce(tty: boolean): Promise<string> {
    const upHome = await tempDir('trainyard-up-logs-');
    const env = {
      ...process.env,
      TRAINYARD_HOME: upHome.path,
      XDG_STATE_HOME: upHome.path,
      TRAINYARD_PORT: '0',
      TRAINYARD_LOG_LEVEL: 'info',
      TRAINYARD_ADMIN_PASSWORD: 'up-keeper-pass-1',
      DATABASE_URL: inject('pgUrl'),
    };
    const command = `${process.execPath} ${BIN} up --no-worker`;
    const child = tty
      ? spawn('script', ['-qfec', command, '/dev/null'], { env, stdio: ['pipe', 'pipe', 'pipe'] })
      : spawn(process.execPath, [BIN, 'up', '--no-worker'], {
          env,
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
    let out = '';
    child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      await waitFor('the stack to be up', () => out.includes('Trainyard is up.'), {
        timeoutMs: 60_000,
      });
      if (tty) child.stdin!.write('\x03');
      else process.kill(-child.pid!, 'SIGINT');
      await exited;
      return out;
    } finally {
      child.kill('SIGKILL');
      await upHome.remove();
    }
  }

  it('are lines for a person on a terminal, and JSON elsewhere', async () => {
    const pretty = await upOnce(true);
    expect(pretty).toMatch(/INFO.*api listening/);
    expect(pretty).not.toContain('{"level"');
    const json = await upOnce(false);
    expect(json).toMatch(/\{"level":30,[^\n]*"msg":"api listening"/);
  });
});
