import { execFile, execFileSync, type ChildProcess } from 'node:child_process';
import { access, chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import { connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { spawnLogged, stopChild, waitUntil, type ChildServer } from './child.ts';
import { ServerError } from './errors.ts';
import { CONTROL_ACCOUNT, controlExports, WORKER_ACCOUNT, workerImports } from './permissions.ts';
import { freePort, portInUse } from './ports.ts';

export interface NatsServerOptions {
  dir: string;
  port?: number;
  binary?: string;
  /** Extra arguments, e.g. a cluster config. */
  args?: string[];
  /** The server's environment (a config file may read passwords from it). */
  env?: NodeJS.ProcessEnv;
  /**
   * When given, only these users may connect, each with its permissions: the control plane's,
   * in an account with JetStream (`CONTROL_ACCOUNT`).
   */
  users?: NatsUser[];
  /**
   * Workers' logins (with `users`), in an account of their own that holds no stream
   * (`WORKER_ACCOUNT`): what the server sends on a worker's behalf stays there.
   */
  workers?: NatsUser[];
  /** The address to listen on (default 127.0.0.1). */
  host?: string;
  /** Require TLS of every client, with this certificate and key (PEM files); needs `users`. */
  tls?: { cert: string; key: string };
}

/** Subjects a NATS user may or may not publish to, or subscribe to. */
export interface NatsPermissions {
  publish?: { allow?: string[]; deny?: string[] };
  subscribe?: { allow?: string[]; deny?: string[] };
}

/** A user of a nats-server that requires a login. */
export interface NatsUser {
  user: string;
  password: string;
  /** Absent: the user may publish and subscribe to anything. */
  permissions?: NatsPermissions;
}

const execFileAsync = promisify(execFile);

/** A user that proves itself with an nkey: nats-server keeps only the public half. */
export interface NatsKeyUser {
  nkey: string;
  permissions: NatsPermissions;
}

/**
 * An `accounts` block, in the JSON that nats-server's config reads: the control plane's users in
 * `CONTROL_ACCOUNT`, with JetStream; workers' in `WORKER_ACCOUNT`, which holds no stream and
 * reaches the control plane's account only through the services it imports.
 */
function accountsConfig(users: NatsUser[], workers: (NatsUser | NatsKeyUser)[]): string {
  const accounts = {
    [CONTROL_ACCOUNT]: { jetstream: 'enabled', users, exports: controlExports() },
    [WORKER_ACCOUNT]: { users: workers, imports: workerImports() },
  };
  return `accounts ${JSON.stringify(accounts, null, 2)}\n`;
}

/** A nats-server this process started; `setWorkers` replaces which workers may log in, at once. */
export interface NatsServer extends ChildServer {
  /**
   * Writes the workers' logins (those given at start, plus `extra`) and has the server reload
   * them; resolves once the server reports the reload done: a new login works from then on, and
   * the server has ended each connection whose login is gone (its client hears of it soon
   * after). Only for a server started with `users`.
   */
  setWorkers(extra: (NatsUser | NatsKeyUser)[]): Promise<void>;
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/**
 * A store kept before the control plane's logins had an account of their own holds its streams
 * under the global account (`$G`): they move to `CONTROL_ACCOUNT` before the server starts.
 */
async function moveGlobalStreams(store: string): Promise<void> {
  const global = join(store, 'jetstream', '$G');
  const control = join(store, 'jetstream', CONTROL_ACCOUNT);
  if ((await exists(global)) && !(await exists(control))) await rename(global, control);
}

/** Where `nats-server` is, or null when it is not installed. */
export function findNatsServer(): string | null {
  for (const candidate of [
    process.env.TRAINYARD_NATS_SERVER,
    'nats-server',
    '/usr/sbin/nats-server',
  ]) {
    if (!candidate) continue;
    try {
      execFileSync(candidate, ['--version'], { stdio: 'ignore' });
      return candidate;
    } catch {
      continue;
    }
  }
  return null;
}

const RELOADED = 'Reloaded server configuration';
const RELOAD_FAILED = /Failed to reload server configuration: ([^\n]*)/;

/**
 * Resolves when `child`, a nats-server, next reports a reload done; rejects with its reason when
 * it reports one failed, when it exits, or after `timeoutMs`. A login the reload adds works, and
 * one it removes is closed, only once the report is out.
 */
function nextReload(child: ChildProcess, timeoutMs = 15_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.reject(new Error('nats-server has exited'));
  return new Promise((resolve, reject) => {
    let seen = '';
    const settle = (err?: Error) => {
      clearTimeout(timer);
      child.off('exit', exited);
      for (const stream of [child.stdout, child.stderr]) stream?.off('data', read);
      if (err) reject(err);
      else resolve();
    };
    const read = (chunk: Buffer) => {
      seen += chunk.toString();
      const failed = RELOAD_FAILED.exec(seen);
      if (failed) settle(new Error(`nats-server did not reload: ${failed[1]}`));
      else if (seen.includes(RELOADED)) settle();
      // What is kept is enough to find a report cut between two chunks.
      else seen = seen.slice(-1024);
    };
    const exited = () => settle(new Error('nats-server exited before it reloaded'));
    const timer = setTimeout(
      () => settle(new Error(`nats-server did not report its reload within ${timeoutMs} ms`)),
      timeoutMs,
    );
    child.once('exit', exited);
    for (const stream of [child.stdout, child.stderr]) stream?.on('data', read);
  });
}

/** Where this machine reaches a server listening on `host`: loopback for any address. */
const reachableHost = (host: string) => (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);

/** A host as a URL names it: an IPv6 address in brackets. */
export const urlHost = (host: string) => (host.includes(':') ? `[${host}]` : host);

function tcpOpen(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = netConnect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Starts `nats-server -js` on 127.0.0.1 with its store under `dir`. */
export async function startNatsServer(opts: NatsServerOptions): Promise<NatsServer> {
  const binary = opts.binary ?? findNatsServer();
  if (!binary) {
    throw new ServerError(
      'NOT_INSTALLED',
      'nats-server is not installed: install it with `apt-get install -y nats-server` (or run `npm run setup`), or set TRAINYARD_NATS_URL to a server you run',
    );
  }
  await mkdir(opts.dir, { recursive: true, mode: 0o700 });
  await chmod(opts.dir, 0o700);
  if (opts.port && (await portInUse(opts.port))) {
    throw new ServerError('PORT_IN_USE', `port ${opts.port} is already in use`);
  }
  if (opts.tls && !opts.users) throw new Error('a nats-server with TLS takes logins');
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? (await freePort());
  const args = [...(opts.args ?? [])];
  const auth = join(opts.dir, 'auth.conf');
  const store = join(opts.dir, 'jetstream');
  // JetStream is named in the file a server with logins reloads: a 2.9 server reloading a file
  // without it shuts JetStream down, whatever its flags said.
  const jetstreamConfig =
    `jetstream ${JSON.stringify({ store_dir: store })}\n` +
    (opts.tls
      ? `tls ${JSON.stringify({ cert_file: opts.tls.cert, key_file: opts.tls.key, timeout: 5 })}\n`
      : '');
  /** Writes the users; a file nats-server would not take is refused before it replaces the old. */
  const writeUsers = async (extra: (NatsUser | NatsKeyUser)[]) => {
    const next = `${auth}.next`;
    await writeFile(
      next,
      jetstreamConfig + accountsConfig(opts.users ?? [], [...(opts.workers ?? []), ...extra]),
      { mode: 0o600 },
    );
    try {
      await execFileAsync(binary, ['-t', '-c', next]);
    } catch (err) {
      throw new ServerError(
        'BAD_CONFIG',
        `nats-server refuses the users it was given: ${(err as { stderr?: string }).stderr?.trim() ?? (err as Error).message}`,
        { cause: err },
      );
    }
    await rename(next, auth);
  };
  if (opts.workers && !opts.users) throw new Error('a nats-server with workers takes logins');
  if (opts.users) {
    await moveGlobalStreams(store);
    await writeUsers([]);
    args.push('-c', auth);
  }
  const child = spawnLogged(
    binary,
    [...(opts.users ? [] : ['-js', '-sd', store]), '-a', host, '-p', String(port), ...args],
    join(opts.dir, 'nats-server.log'),
    { cwd: opts.dir, ...(opts.env && { env: opts.env }) },
  );
  const log = join(opts.dir, 'nats-server.log');
  await waitUntil('nats-server', () => tcpOpen(port, reachableHost(host)), 15_000, child).catch(
    (cause: unknown) => {
      throw new ServerError(
        'START_FAILED',
        `nats-server did not start on port ${port} (${(cause as Error).message}); its log: ${log}`,
        { cause },
      );
    },
  );
  /** One reload at a time: each waits for the report of its own. */
  let reloads: Promise<unknown> = Promise.resolve();
  return {
    pid: child.pid!,
    url: `nats://${urlHost(reachableHost(host))}:${port}`,
    stop: () => stopChild(child, 'SIGTERM'),
    kill: () => stopChild(child, 'SIGKILL'),
    setWorkers: (extra) => {
      if (!opts.users) return Promise.reject(new Error('this nats-server takes no logins'));
      const reload = reloads.then(async () => {
        await writeUsers(extra);
        const reloaded = nextReload(child);
        child.kill('SIGHUP');
        await reloaded;
      });
      reloads = reload.catch(() => undefined);
      return reload;
    },
  };
}
