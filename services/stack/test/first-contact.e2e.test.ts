import { execFile, execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { freePort, sharedStateDir } from '@trainyard/servers';
import { pidsMatching, processAlive, waitFor } from '@trainyard/testkit';

const REPO = resolve(fileURLToPath(new URL('../../..', import.meta.url)));

/** The environment of a newcomer's shell: none of the test run's Trainyard settings. */
function newcomerEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !k.startsWith('TRAINYARD_') && k !== 'DATABASE_URL' && !k.startsWith('VITEST'),
    ),
  );
  return { ...env, npm_config_prefer_offline: 'true', ...extra };
}

/** Copies the repository as `git clone` would give it: its tracked and unignored files. */
function cloneInto(target: string): void {
  const files = execFileSync('git', ['ls-files', '-z', '-co', '--exclude-standard'], {
    cwd: REPO,
    encoding: 'utf8',
  })
    .split('\0')
    .filter(Boolean);
  for (const f of files) {
    mkdirSync(dirname(join(target, f)), { recursive: true });
    cpSync(join(REPO, f), join(target, f), { dereference: false });
  }
}

function run(cmd: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((done) =>
    execFile(cmd, args, { ...opts, timeout: 120_000 }, (err, stdout, stderr) =>
      done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  );
}

/** `npm run up` in the background, until it says it is up (or ends first). */
async function startUp(clone: string, env: NodeJS.ProcessEnv) {
  const up = spawn('npm', ['run', 'up'], {
    cwd: clone,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  up.stdout.on('data', (c: Buffer) => (out += c.toString()));
  up.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => up.once('exit', r));
  await waitFor(
    'Trainyard to be up',
    () => out.includes('Trainyard is up.') || up.exitCode !== null,
    { timeoutMs: 240_000, intervalMs: 200 },
  ).catch((e: Error) => {
    throw new Error(`${e.message}; it printed:\n${out}`);
  });
  expect(out, out).toContain('Trainyard is up.');
  return {
    pid: up.pid!,
    output: () => out,
    /** Stops it as Ctrl-C does, and waits for it and its servers to end. */
    stop: async (servers: () => number[]) => {
      process.kill(-up.pid!, 'SIGINT');
      await exited;
      await waitFor('its servers to stop', () => servers().filter(processAlive).length === 0, {
        timeoutMs: 30_000,
      });
      expect(out).not.toMatch(/"level":50|stop failed/);
      expect(out).toContain('Trainyard stopped.');
    },
  };
}

describe('a newcomer in a private directory', () => {
  it('runs `npm run up` from a fresh clone, logs in, submits a job, sees it succeed, and finds it after a restart', async () => {
    const root = mkdtempSync(join(tmpdir(), 'trainyard-newcomer-'));
    expect(statSync(root).mode & 0o777).toBe(0o700);
    const clone = join(root, 'trainyard');
    let pgDir: string | null = null;
    const pids: number[] = [];
    try {
      cloneInto(clone);
      const apiPort = await freePort();
      const env = newcomerEnv({
        XDG_CONFIG_HOME: join(root, 'config'),
        XDG_STATE_HOME: join(root, 'state'),
        TRAINYARD_PORT: String(apiPort),
        TRAINYARD_NATS_PORT: String(await freePort()),
        TRAINYARD_LOG_LEVEL: 'warn',
      });
      const first = await startUp(clone, env);
      pids.push(first.pid);
      pgDir = /postgres\s+data in (\S+)/.exec(first.output())?.[1] ?? null;
      if (process.getuid?.() === 0) {
        expect(pgDir).toMatch(/^\/var\/lib\/trainyard\/postgres\//);
      } else {
        expect(pgDir).toBe(join(clone, '.trainyard', 'postgres'));
      }
      const api = `http://127.0.0.1:${apiPort}`;
      expect((await fetch(`${api}/healthz`)).status).toBe(200);
      const password = /admin\s+password (\S+)/.exec(first.output())?.[1];
      expect(password).toBeTruthy();

      const cli = (args: string[], cwd = clone) =>
        run(process.execPath, [join(clone, 'services/cli/bin/trainyard.js'), ...args], {
          cwd,
          env,
        });
      const login = await cli(['login', '-u', 'admin', '-p', password!]);
      expect(login.code, login.stderr).toBe(0);
      const job = await cli([
        'submit',
        'examples/hello',
        '--command',
        'python3 train.py',
        '--follow',
      ]);
      expect(job.code, `${job.stdout}\n${job.stderr}`).toBe(0);
      expect(job.stderr).toMatch(/job job_\w+ succeeded \(exit 0\)/);
      const jobId = /job (job_\w+) succeeded/.exec(job.stderr)![1]!;
      const metrics = await waitFor('the job’s training metrics', async () => {
        const shown = await cli(['metrics', jobId]);
        return shown.code === 0 && /accuracy/.test(shown.stdout) ? shown.stdout : undefined;
      });
      expect(metrics).toMatch(/loss\s+20\s/);

      const elsewhere = await cli(['events', 'verify'], root);
      expect(elsewhere.code, elsewhere.stderr).toBe(0);
      expect(elsewhere.stdout).toMatch(/ 0 broken, signatures checked against 1 trusted key/);

      const servers = () => [...pidsMatching(clone), ...pidsMatching(pgDir!)];
      await first.stop(servers);

      const again = await startUp(clone, env);
      pids.push(again.pid);
      expect(again.output()).not.toMatch(/admin\s+password/);
      const listed = await cli(['ls']);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toMatch(new RegExp(`${jobId}\\s.*succeeded`));
      await again.stop(servers);
    } finally {
      for (const left of [
        ...pids.map((p) => -p),
        ...pidsMatching(root).filter(processAlive),
        ...(pgDir ? pidsMatching(pgDir).filter(processAlive) : []),
      ]) {
        try {
          process.kill(left, 'SIGKILL');
        } catch {
          continue;
        }
      }
      rmSync(root, { recursive: true, force: true });
      if (pgDir && !pgDir.startsWith(root)) rmSync(pgDir, { recursive: true, force: true });
      rmSync(sharedStateDir(join(clone, '.trainyard'), 'sandboxes'), {
        recursive: true,
        force: true,
      });
    }
  }, 420_000);
});
