import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chmod, chown, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnLogged, stopChild, waitUntil, type ChildServer } from './child.ts';
import { freePort } from './ports.ts';

export interface PostgresOptions {
  dir: string;
  port?: number;
  /** Skip fsync: for tests and benchmarks, never for data you keep. */
  fast?: boolean;
}

/** The directory holding `initdb` and `postgres`, or null when PostgreSQL is not installed. */
export function findPostgresBin(): string | null {
  if (process.env.TRAINYARD_PG_BIN) return process.env.TRAINYARD_PG_BIN;
  const root = '/usr/lib/postgresql';
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions[0]) return join(root, versions[0], 'bin');
  }
  return null;
}

const isRoot = () => process.getuid?.() === 0;

/** The user PostgreSQL runs as: `postgres` when we are root (initdb refuses root), else us. */
function owner(): { uid?: number; gid?: number } {
  if (!isRoot()) return {};
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  return { uid, gid };
}

async function ownDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await chmod(dir, 0o700);
  const { uid, gid } = owner();
  if (uid !== undefined && gid !== undefined) await chown(dir, uid, gid);
}

/**
 * Starts a PostgreSQL server of our own on 127.0.0.1, creating its cluster under `dir` on the
 * first start. Trust auth, loopback only. The parent of `dir` must be readable by `postgres`.
 */
export async function startPostgres(opts: PostgresOptions): Promise<ChildServer> {
  const bin = findPostgresBin();
  if (!bin) throw new Error('PostgreSQL is not installed (apt-get install -y postgresql)');
  const data = join(opts.dir, 'data');
  const sockets = join(opts.dir, 'sockets');
  await mkdir(opts.dir, { recursive: true, mode: 0o755 });
  await chmod(opts.dir, 0o755);
  if (!existsSync(join(data, 'PG_VERSION'))) {
    await ownDir(data);
    try {
      execFileSync(
        join(bin, 'initdb'),
        [
          '-D',
          data,
          '-U',
          'postgres',
          '--auth=trust',
          '-E',
          'UTF8',
          '--locale=C.UTF-8',
          '--no-sync',
        ],
        { stdio: 'pipe', ...owner(), env: { ...process.env, HOME: opts.dir } },
      );
    } catch (err) {
      const stderr = String((err as { stderr?: Buffer }).stderr ?? '').trim();
      throw new Error(`initdb failed in ${data}: ${stderr}`, { cause: err });
    }
  }
  await ownDir(sockets);
  const port = opts.port ?? (await freePort());
  const settings = [
    '-D',
    data,
    '-p',
    String(port),
    '-k',
    sockets,
    '-c',
    'listen_addresses=127.0.0.1',
    ...(opts.fast
      ? ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']
      : []),
  ];
  const child = spawnLogged(join(bin, 'postgres'), settings, join(opts.dir, 'postgres.log'), {
    cwd: opts.dir,
    ...owner(),
  });
  const ready = () => {
    try {
      execFileSync(join(bin, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port), '-q']);
      return Promise.resolve(true);
    } catch {
      return Promise.resolve(false);
    }
  };
  await waitUntil('postgres', ready, 30_000, child);
  return {
    pid: child.pid!,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop: () => stopChild(child, 'SIGINT'),
    kill: () => stopChild(child, 'SIGKILL'),
  };
}
