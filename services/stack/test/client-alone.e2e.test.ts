import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cp, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { ADMIN_PASSWORD, startTestStack, type TestStack } from './harness.ts';

const REPO = resolve(fileURLToPath(new URL('../../..', import.meta.url)));

interface Manifest {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
}

const manifest = (dir: string) =>
  JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;

/** The workspace's own packages, by name. */
function workspaces(): Map<string, string> {
  const found = new Map<string, string>();
  for (const group of ['packages', 'services']) {
    for (const entry of readdirSync(join(REPO, group))) {
      const dir = join(REPO, group, entry);
      if (existsSync(join(dir, 'package.json'))) found.set(manifest(dir).name, dir);
    }
  }
  return found;
}

/**
 * Installs `@trainyard/cli` into `root/node_modules` with its declared dependencies and nothing
 * else, as `npm install` would for a laptop: the workspace packages it needs are copied (so that
 * nothing resolves from the repository), libraries are linked. Returns the Trainyard packages
 * installed.
 */
async function installClientAlone(root: string): Promise<string[]> {
  const ours = workspaces();
  const installed: string[] = [];
  const queue = ['@trainyard/cli'];
  const linked = new Set<string>();
  while (queue.length > 0) {
    const name = queue.shift()!;
    if (installed.includes(name)) continue;
    const dir = ours.get(name);
    if (!dir) throw new Error(`${name} is not a package of this repository`);
    installed.push(name);
    const target = join(root, 'node_modules', name);
    await mkdir(dirname(target), { recursive: true });
    await cp(dir, target, {
      recursive: true,
      filter: (src) => !/\/(node_modules|test)(\/|$)/.test(src.slice(dir.length)),
    });
    for (const dep of Object.keys(manifest(dir).dependencies ?? {})) {
      if (ours.has(dep)) {
        queue.push(dep);
        continue;
      }
      const nested = join(dir, 'node_modules', dep);
      const where = existsSync(nested) ? nested : join(REPO, 'node_modules', dep);
      const link = existsSync(nested)
        ? join(target, 'node_modules', dep)
        : join(root, 'node_modules', dep);
      if (linked.has(link)) continue;
      linked.add(link);
      await mkdir(dirname(link), { recursive: true });
      await symlink(where, link);
    }
  }
  return installed;
}

let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;
let installed: string[];

type Run = { code: number; stdout: string; stderr: string };

/** The lone client's `trainyard`, as a user on a laptop runs it. */
function trainyard(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [join(work.path, 'node_modules', '@trainyard', 'cli', 'bin', 'trainyard.js'), ...args],
      {
        cwd: work.path,
        timeout: 60_000,
        env: {
          PATH: process.env.PATH,
          HOME: work.path,
          XDG_CONFIG_HOME: join(work.path, 'config'),
          XDG_STATE_HOME: join(work.path, 'state'),
          ...env,
        },
      },
      (err, stdout, stderr) =>
        done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

beforeAll(async () => {
  work = await tempDir('trainyard-client-');
  installed = await installClientAlone(work.path);
  t = await startTestStack();
}, 120_000);

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('the trainyard client installed alone', () => {
  it('needs no server package', () => {
    expect(installed.sort()).toEqual(['@trainyard/cli', '@trainyard/events']);
    expect(existsSync(join(work.path, 'node_modules', '@trainyard', 'stack'))).toBe(false);
    expect(existsSync(join(work.path, 'node_modules', 'postgres'))).toBe(false);
    expect(existsSync(join(work.path, 'node_modules', 'fastify'))).toBe(false);
  });

  it('names the package that brings the server commands', async () => {
    const help = await trainyard(['--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/submit \[options\] \[dir\]/);
    expect(help.stdout).toMatch(
      /up \[args\.\.\.\]\s+run the whole stack on this machine \(needs\s+@trainyard\/stack\)/,
    );
    const serverCommands: [string[], string][] = [
      [['up'], 'up'],
      [['worker', '--name', 'w1'], 'worker'],
      [['events', 'verify'], 'events verify'],
      [['projections', 'rebuild'], 'projections'],
    ];
    for (const [args, name] of serverCommands) {
      const r = await trainyard(args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr).toContain(`\`trainyard ${name}\` runs part of the Trainyard server`);
      expect(r.stderr).toContain('install @trainyard/stack');
      expect(r.stderr).not.toMatch(/ERR_MODULE_NOT_FOUND|\.ts:\d+/);
    }
    const token = await trainyard(['worker', 'token', 'create', '--help']);
    expect(token.code).toBe(0);
    expect(token.stdout).toContain('issue a one-time token a worker enrols with');
  });

  it('keeps its own commands when the server side is installed but cannot load', async () => {
    const broken = join(work.path, 'node_modules', '@trainyard', 'stack');
    await mkdir(broken, { recursive: true });
    await writeFile(
      join(broken, 'package.json'),
      JSON.stringify({ name: '@trainyard/stack', type: 'module', exports: './index.js' }),
    );
    await writeFile(join(broken, 'index.js'), "import '@trainyard/not-installed';\n");
    try {
      const help = await trainyard(['--help']);
      expect(help.code, help.stderr).toBe(0);
      expect(help.stdout).toMatch(/submit \[options\] \[dir\]/);
      const up = await trainyard(['up']);
      expect(up.code).toBe(1);
      expect(up.stderr).toContain('@trainyard/stack is installed but cannot be loaded');
      expect(up.stderr).toContain("'@trainyard/not-installed'");
    } finally {
      await rm(broken, { recursive: true, force: true });
    }
  });

  it('logs in, submits, follows and downloads outputs from a running Trainyard', async () => {
    const login = await trainyard(['--api', t.url, 'login', '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(login.code, login.stderr).toBe(0);
    expect(login.stdout).toContain(`logged in to ${t.url} as admin`);
    const project = join(work.path, 'project');
    await mkdir(project);
    await writeFile(
      join(project, 'train.py'),
      'import os\nprint("alone", flush=True)\nopen(os.path.join(os.environ["TRAINYARD_OUTPUT_DIR"], "w.txt"), "w").write("7")\n',
    );
    const run = await trainyard(['submit', project, '--command', 'python3 train.py', '--follow']);
    expect(run.code, `${run.stderr}\n${run.stdout}`).toBe(0);
    const id = run.stdout.split('\n')[0]!.trim();
    expect(id).toMatch(/^job_/);
    expect(run.stdout).toContain('alone\n');
    const out = await trainyard(['outputs', id, '--download', join(work.path, 'out')]);
    expect(out.code, out.stderr).toBe(0);
    expect(readFileSync(join(work.path, 'out', 'w.txt'), 'utf8')).toBe('7');
  });
});

describe('the packed client (`npm run client:pack`), installed with npm on a machine without the repository', () => {
  let prefix: string;
  /** The installed `trainyard`, run from a directory outside the repository. */
  const packed = (args: string[]): Promise<Run> =>
    new Promise((done) => {
      execFile(
        join(prefix, 'bin', 'trainyard'),
        args,
        {
          cwd: work.path,
          timeout: 60_000,
          env: {
            PATH: process.env.PATH,
            HOME: join(work.path, 'packed-home'),
            XDG_CONFIG_HOME: join(work.path, 'packed-home', 'config'),
            XDG_STATE_HOME: join(work.path, 'packed-home', 'state'),
          },
        },
        (err, stdout, stderr) =>
          done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });

  beforeAll(async () => {
    const out = join(work.path, 'packs');
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(REPO, 'services/cli/scripts/pack.ts'), '--out', out],
      { cwd: REPO, timeout: 120_000 },
    );
    const tarball = stdout.split('\n')[0]!;
    expect(tarball).toMatch(/\/packs\/trainyard-\d+\.\d+\.\d+\.tgz$/);
    prefix = join(work.path, 'prefix');
    await promisify(execFile)(
      'npm',
      ['install', '-g', '--prefix', prefix, '--offline', '--no-audit', '--no-fund', tarball],
      { cwd: work.path, timeout: 120_000 },
    );
  }, 240_000);

  it('installs as one package with no dependencies and no TypeScript', () => {
    const installed = join(prefix, 'lib', 'node_modules', 'trainyard');
    expect(readdirSync(installed).sort()).toEqual(['bin', 'package.json', 'trainyard.mjs']);
    expect(manifest(installed).dependencies).toBeUndefined();
  });

  it('logs in, submits and follows a job, and says the server commands need the server', async () => {
    const version = await packed(['--version']);
    expect(version.code, version.stderr).toBe(0);
    expect(version.stdout.trim()).toBe(
      manifest(join(prefix, 'lib', 'node_modules', 'trainyard')).version,
    );

    const login = await packed(['--api', t.url, 'login', '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(login.code, login.stderr).toBe(0);
    const project = join(work.path, 'packed-project');
    await mkdir(project);
    await writeFile(join(project, 'train.py'), 'print("packed", flush=True)\n');
    const run = await packed(['submit', project, '--command', 'python3 train.py', '--follow']);
    expect(run.code, `${run.stderr}\n${run.stdout}`).toBe(0);
    expect(run.stdout).toContain('packed\n');

    const help = await packed(['--help']);
    expect(help.stdout).toMatch(/up \[args\.\.\.\]\s+run the whole stack on this machine \(needs/);
    const up = await packed(['up']);
    expect(up.code).toBe(1);
    expect(up.stderr).toContain('`trainyard up` runs part of the Trainyard server');
    expect(up.stderr).not.toMatch(/ERR_MODULE_NOT_FOUND|\.ts:\d+/);
  });
});
