import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { chmod, chown, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { spawnLogged, stopChild, waitUntil, type ChildServer } from './child.ts';
import { ServerError } from './errors.ts';
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

/** Where root keeps what other users must reach: a directory anyone may pass through. */
export const ROOT_STATE_BASE = '/var/lib/trainyard';
export const ROOT_POSTGRES_BASE = join(ROOT_STATE_BASE, 'postgres');

/**
 * Where the stack whose state is in `home` keeps `what` (`postgres`, `sandboxes`) when other
 * users must reach it. As any user but root that is `home/what`. As root, PostgreSQL runs as
 * `postgres` and jobs as users of their own, and none of them can enter a private directory
 * such as root's home or a `mktemp -d` folder, so it goes under `/var/lib/trainyard/what`, in a
 * directory named after `home` (its base name and a hash of its path). Neither holds what
 * cannot be had again: the read models are rebuilt from the log kept under `home`, and a
 * sandbox lives only as long as its attempt.
 */
export function sharedStateDir(home: string, what: string, base = ROOT_STATE_BASE): string {
  const path = resolve(home);
  if (!isRoot()) return join(path, what);
  const tag = createHash('sha256').update(path).digest('hex').slice(0, 12);
  const name =
    basename(dirname(path))
      .replace(/[^A-Za-z0-9_.-]/g, '_')
      .slice(0, 40) || 'home';
  return join(base, what, `${name}-${tag}`);
}

/** Where the embedded PostgreSQL of the stack whose state is in `home` keeps its files. */
export const embeddedPostgresDir = (home: string) => sharedStateDir(home, 'postgres');

interface Account {
  uid: number;
  gid: number;
}

/** The account PostgreSQL runs as: `postgres` when we are root (initdb refuses root), else us. */
function postgresAccount(): Account | null {
  if (!isRoot()) return null;
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { stdio: 'pipe' }).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { stdio: 'pipe' }).toString());
    return { uid, gid };
  } catch {
    throw new ServerError(
      'NOT_INSTALLED',
      'there is no `postgres` user to run the embedded PostgreSQL as (root may not run it); install PostgreSQL with `apt-get install -y postgresql`, or set DATABASE_URL to a server you run',
    );
  }
}

function owner(): { uid?: number; gid?: number } {
  return postgresAccount() ?? {};
}

/** The first directory on the way to `dir` that `account` may not pass through, or null. */
export function blockedAncestor(dir: string, account: Account): string | null {
  const chain: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    chain.unshift(d);
    if (d === dirname(d)) break;
  }
  for (const d of chain) {
    let info;
    try {
      info = statSync(d);
    } catch {
      return null;
    }
    const mode = info.mode;
    const passes =
      info.uid === account.uid
        ? (mode & 0o100) !== 0
        : info.gid === account.gid
          ? (mode & 0o010) !== 0
          : (mode & 0o001) !== 0;
    if (!passes) return d;
  }
  return null;
}

async function ownDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await chmod(dir, 0o700);
  const { uid, gid } = owner();
  if (uid !== undefined && gid !== undefined) await chown(dir, uid, gid);
}

/**
 * Makes a cluster whose superuser `postgres` logs in with `password` (scram-sha-256), over the
 * socket and over TCP alike. The password reaches initdb in a file only `postgres` can read,
 * removed once it has been read.
 */
async function initCluster(bin: string, dir: string, data: string, password: string) {
  await ownDir(data);
  const pwfile = join(dir, 'initdb.pw');
  await writeFile(pwfile, password, { mode: 0o600 });
  const { uid, gid } = owner();
  if (uid !== undefined && gid !== undefined) await chown(pwfile, uid, gid);
  try {
    execFileSync(
      join(bin, 'initdb'),
      [
        '-D',
        data,
        '-U',
        'postgres',
        '--auth=scram-sha-256',
        `--pwfile=${pwfile}`,
        '-E',
        'UTF8',
        '--locale=C.UTF-8',
        '--no-sync',
      ],
      { stdio: 'pipe', ...owner(), env: { ...process.env, HOME: dir } },
    );
  } catch (err) {
    const stderr = String((err as { stderr?: Buffer }).stderr ?? '').trim();
    throw new ServerError('START_FAILED', `initdb failed in ${data}: ${stderr}`, {
      cause: err,
    });
  } finally {
    await rm(pwfile, { force: true });
  }
}

/**
 * Starts a PostgreSQL server of our own on 127.0.0.1, creating its cluster under `dir` on the
 * first start. Loopback only, and a password for everyone, kept in `dir/password` (0600): a
 * job on the host cannot log in. A cluster made before passwords (trust) is made again: it
 * holds only projections, which are rebuilt from the log. As root it runs as `postgres`, which must be able to
 * reach `dir` (see `embeddedPostgresDir`).
 */
export async function startPostgres(opts: PostgresOptions): Promise<ChildServer> {
  const bin = findPostgresBin();
  if (!bin) {
    throw new ServerError(
      'NOT_INSTALLED',
      'PostgreSQL is not installed: install it with `apt-get install -y postgresql` (or run `npm run setup`), or set DATABASE_URL to a server you run',
    );
  }
  const account = postgresAccount();
  const blocked = account && blockedAncestor(opts.dir, account);
  if (blocked) {
    throw new ServerError(
      'UNREACHABLE_DIR',
      `PostgreSQL runs as the postgres user, which cannot enter ${blocked}; keep its data outside private directories (${ROOT_POSTGRES_BASE} is the default for root)`,
    );
  }
  const data = join(opts.dir, 'data');
  const sockets = join(opts.dir, 'sockets');
  const passwordFile = join(opts.dir, 'password');
  await mkdir(dirname(opts.dir), { recursive: true, mode: 0o755 });
  await mkdir(opts.dir, { recursive: true, mode: 0o755 });
  await chmod(opts.dir, 0o755);
  let password = await readFile(passwordFile, 'utf8').catch(() => null);
  if (existsSync(join(data, 'PG_VERSION')) && !password) await rm(data, { recursive: true });
  if (!existsSync(join(data, 'PG_VERSION'))) {
    password = randomBytes(24).toString('base64url');
    await initCluster(bin, opts.dir, data, password);
    await writeFile(passwordFile, password, { mode: 0o600 });
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
  await waitUntil('postgres', ready, 30_000, child).catch((cause: unknown) => {
    throw new ServerError(
      'START_FAILED',
      `PostgreSQL did not start (${(cause as Error).message}); its log: ${join(opts.dir, 'postgres.log')}`,
      { cause },
    );
  });
  return {
    pid: child.pid!,
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    stop: () => stopChild(child, 'SIGINT'),
    kill: () => stopChild(child, 'SIGKILL'),
  };
}
