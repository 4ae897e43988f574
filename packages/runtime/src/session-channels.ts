/**
 * A session's SSH channels, opened on the worker that holds the session (process runtime): a
 * command, a shell, the sftp server or a TCP connection, in the session's sandbox directory and
 * as its unprivileged uid. The gateway carries their bytes over the tunnel.
 */
import { accessSync, constants as fs, existsSync, readFileSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { isAbsolute } from 'node:path';
import {
  type Channel,
  type ChannelExit,
  ChannelRefused,
  type ChannelRequest,
} from '@trainyard/tunnel';
import { type ChannelCommand, ended, noop, pipeChannel, ptyChannel } from './process-channel.ts';
import { userName } from './env.ts';
import type { SessionUser } from './trampoline.ts';

/**
 * Where a session's channels run: its sandbox directory, its uid and gid (absent: as the worker
 * itself, for tests and development) and its environment, the only one its processes get.
 */
export interface LocalPlace {
  dir: string;
  uid?: number;
  gid?: number;
  env: Record<string, string>;
}

/** What a worker may set up differently; the defaults fit a Debian worker. */
export interface LocalChannelOptions {
  /** OpenSSH's sftp server (default `SFTP_SERVER`). */
  sftpServer?: string;
  /** How long `close()` waits after SIGTERM before SIGKILL (default 1 s). */
  closeGraceMs?: number;
  /** How long a forward waits for its connection (default 10 s). */
  connectTimeoutMs?: number;
}

/** `PATH` for a session whose environment names none: no sbin, nothing of the worker's. */
export const SESSION_PATH = '/usr/local/bin:/usr/bin:/bin';
/** Where Debian's openssh-sftp-server installs the sftp server. */
export const SFTP_SERVER = '/usr/lib/openssh/sftp-server';

/**
 * The names a session takes from the client's environment: its locale and terminal. Everything
 * else is dropped, above all what changes what runs or how: `PATH`, `LD_*`, `BASH_ENV`, `ENV`,
 * `HOME`, `SHELL`, `IFS`, `PYTHON*`, `PERL5*`…
 */
const CLIENT_ENV = /^(LANG|LANGUAGE|LC_[A-Z]+|TERM|COLORTERM|NO_COLOR)$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The lowest uid or gid a session may run as: below are the system's accounts (as `endUser`). */
const LOWEST_ID = 1000;

/**
 * What a session's processes see: `place.env` (never the worker's environment), `PATH`, `HOME`
 * (the sandbox) and `SHELL` where it names none, then the client's locale and terminal names.
 * Without `shell`, `SHELL` is left to what starts the process: in a container, the launcher
 * that picks the image's shell (see container-channels.ts).
 */
export function sessionEnv(
  place: Pick<LocalPlace, 'dir' | 'env'>,
  shell: string | undefined,
  client: Record<string, string> = {},
): Record<string, string> {
  const env: Record<string, string> = {};
  const usable = ([name, value]: [string, string]) =>
    ENV_NAME.test(name) && typeof value === 'string' && !value.includes('\0');
  for (const [name, value] of Object.entries(place.env).filter(usable)) env[name] = value;
  env.PATH ??= SESSION_PATH;
  env.HOME ??= place.dir;
  if (shell !== undefined) env.SHELL ??= shell;
  for (const [name, value] of Object.entries(client).filter(usable))
    if (CLIENT_ENV.test(name)) env[name] = value;
  return env;
}

/**
 * Opens `request` in the session at `place`. A command or shell runs under `/bin/bash` (else
 * `/bin/sh`) in its own session and process group, on a terminal when one was asked for; sftp is
 * OpenSSH's server started in the sandbox; a forward connects to 127.0.0.1. The process runtime
 * shares the worker's loopback, so a session with a uid reaches only a port that uid listens on
 * there, not the worker's own services. Rejects with a `ChannelRefused`: `unreachable` for a
 * port the session does not listen on, `refused` for anything that cannot start.
 */
export async function openLocalChannel(
  place: LocalPlace,
  request: ChannelRequest,
  opts: LocalChannelOptions = {},
): Promise<Channel> {
  const shell = existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
  const user = userOf(place, shell);
  if (request.kind === 'forward') {
    const { port } = request;
    if (user && !listensOnLoopback(user.uid, port))
      throw new ChannelRefused('unreachable', `the session does not listen on port ${port}`);
    return forward(port, opts.connectTimeoutMs ?? 10_000);
  }
  let isDir = false;
  try {
    isDir = isAbsolute(place.dir) && statSync(place.dir).isDirectory();
  } catch {
    // Missing: refused below.
  }
  if (!isDir) throw new ChannelRefused('refused', "the session's directory is missing");
  const graceMs = opts.closeGraceMs ?? 1_000;
  const env = sessionEnv(place, shell, request.kind === 'sftp' ? {} : request.env);
  if (user) {
    env.USER ??= user.name;
    env.LOGNAME ??= user.name;
  }
  if (request.kind === 'sftp') {
    return sftp(place, env, user, opts.sftpServer ?? SFTP_SERVER, graceMs);
  }
  if (request.pty) env.TERM = request.pty.term || env.TERM || 'dumb';
  const command: ChannelCommand = {
    argv: request.kind === 'exec' ? [shell, '-c', request.command] : [shell, '-l'],
    cwd: place.dir,
    env,
    graceMs,
    ...(user ? { user } : {}),
  };
  if (!request.pty) return pipeChannel(command);
  return ptyChannel(command, request.pty);
}

/**
 * Whom a session's channels run as: its uid and gid, named `trainyard-UID` (home: the sandbox,
 * or `/` for a directory /etc/passwd cannot hold), or nobody else but the worker (`undefined`).
 */
function userOf(place: LocalPlace, shell: string): (SessionUser & { name: string }) | undefined {
  if (place.uid === undefined) {
    if (place.gid !== undefined) throw new ChannelRefused('refused', 'a gid without a uid');
    return undefined;
  }
  const gid = place.gid ?? place.uid;
  const ok = (id: number) => Number.isInteger(id) && id >= LOWEST_ID && id < 2 ** 31;
  if (!ok(place.uid) || !ok(gid))
    throw new ChannelRefused('refused', `a session does not run as uid ${place.uid}, gid ${gid}`);
  const name = userName(place.uid);
  const home = /^[^:\n]*$/.test(place.dir) ? place.dir : '/';
  const entry = `${name}:x:${place.uid}:${gid}:Trainyard session:${home}:${shell}`;
  return { uid: place.uid, gid, entry, name };
}

function sftp(
  place: LocalPlace,
  env: Record<string, string>,
  user: SessionUser | undefined,
  server: string,
  graceMs: number,
): Promise<Channel> {
  try {
    accessSync(server, fs.X_OK);
  } catch {
    throw new ChannelRefused('refused', `no sftp server at ${server}`);
  }
  // `-d` expands `%d` and `%u`: a `%` of the path is written `%%`.
  const argv: [string, ...string[]] = [server, '-d', place.dir.replaceAll('%', '%%')];
  return pipeChannel({ argv, cwd: place.dir, env, graceMs, ...(user && { user }) });
}

/** /proc/net addresses (32-bit words in host order) that 127.0.0.1 reaches: itself, or any. */
const LOOPBACK_REACHES = new Set([
  '0100007F',
  '7F000001',
  '00000000',
  '00000000000000000000000000000000',
  '0000000000000000FFFF00000100007F',
  '00000000000000000000FFFF7F000001',
]);

/** Whether `uid` has a socket listening on `port` that a connection to 127.0.0.1 reaches. */
function listensOnLoopback(uid: number, port: number): boolean {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const [, local = '', , state, , , , owner] = line.trim().split(/\s+/);
      const [address = '', at] = local.split(':');
      const listening = state === '0A' && at === hexPort && Number(owner) === uid;
      if (listening && LOOPBACK_REACHES.has(address)) return true;
    }
  }
  return false;
}

/** A TCP connection to `port` on 127.0.0.1; `input.end()` half-closes it. */
async function forward(port: number, timeoutMs: number): Promise<Channel> {
  if (!Number.isInteger(port) || port < 1 || port > 65_535)
    throw new ChannelRefused('refused', `no port ${port}`);
  const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
  await new Promise<void>((resolve, reject) => {
    const fail = (err: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(new ChannelRefused('unreachable', `nothing answers on port ${port}: ${err.message}`));
    };
    const timer = setTimeout(() => fail(new Error('timed out')), timeoutMs);
    socket.once('error', fail);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', fail);
      resolve();
    });
  });
  socket.on('error', noop);
  const exit = new Promise<ChannelExit>((resolve) =>
    socket.once('close', () => resolve({ code: null, signal: null })),
  );
  return {
    input: socket,
    output: socket,
    errors: ended(),
    resize: noop,
    signal: noop,
    close: () => socket.destroy(),
    exit,
  };
}
