/**
 * A session's SSH channels in a running Docker container (docker runtime): a command or shell
 * through `docker exec`, the image's sftp server, or a TCP connection to a port on the
 * container's own loopback. The worker runs as root on the engine's host, so an exec's host pid
 * is its to signal and the container's network namespace is its to enter.
 */
import { type Duplex, finished, Readable, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type Docker from 'dockerode';
import { assertNever } from '@trainyard/domain';
import {
  type Channel,
  type ChannelExit,
  ChannelRefused,
  type ChannelRequest,
  type PtyRequest,
} from '@trainyard/tunnel';
import { closed, ended, noop } from './process-channel.ts';
import { forward } from './container-forward.ts';
import { sessionEnv } from './session-channels.ts';
import { ExecProcess } from './exec-process.ts';

/** Where a session's channels run: a running container, as whom, where, with what environment. */
export interface ContainerPlace {
  /** The running container the channel opens in. */
  containerId: string;
  /** `uid:gid` the channel's processes run as inside the container (never root). */
  user: string;
  /** The working directory inside the container. */
  dir: string;
  /**
   * The only environment its processes get, with `PATH`, `HOME` and `SHELL` where it names none
   * and the client's locale and terminal names (as `sessionEnv`).
   */
  env: Record<string, string>;
}

/** What a worker may set up differently; the defaults fit a Debian worker. */
export interface ContainerChannelOptions {
  /** How long `close()` waits after SIGTERM before SIGKILL (default 1 s). */
  closeGraceMs?: number;
  /** How long a forward waits for its connection (default 10 s). */
  connectTimeoutMs?: number;
  /** util-linux's nsenter, which a forward enters the container's network with. */
  nsenter?: string;
}

/** Where images put OpenSSH's sftp server: Debian's, Alpine's, Fedora's. */
export const CONTAINER_SFTP_SERVERS = [
  '/usr/lib/openssh/sftp-server',
  '/usr/lib/sftp-server',
  '/usr/libexec/openssh/sftp-server',
] as const;

/**
 * How every exec starts, as `/bin/sh -c LAUNCH sh MODE ARG NAME=VALUE…`: the image's `/bin/sh`
 * picks `/bin/bash` where the image has it, then runs the login shell (`login`), `ARG` as a
 * command line (`command`) or the program `ARG` (`program`) through `env -i` with the session's
 * environment alone. Docker hands an exec the container's own environment (the job's and the
 * image's), none of which is the session's. `SHELL` names the shell picked, unless the session's
 * environment names one, which comes later and so wins.
 */
const LAUNCH = [
  's=/bin/sh; if [ -x /bin/bash ]; then s=/bin/bash; fi',
  'mode=$1 arg=$2; shift 2; PATH=/usr/bin:/bin',
  'case $mode in',
  '  login) exec env -i SHELL="$s" "$@" "$s" -l ;;',
  '  command) exec env -i SHELL="$s" "$@" "$s" -c "$arg" ;;',
  '  *) exec env -i SHELL="$s" "$@" "$arg" ;;',
  'esac',
].join('\n');

/** A command that prints the first sftp server the image has, and fails when it has none. */
const FIND_SFTP_SERVER = `for p in ${CONTAINER_SFTP_SERVERS.join(' ')}; do if [ -x "$p" ]; then echo "$p"; exit 0; fi; done; exit 1`;

/** How long an exec may take to start, and to be seen ended once its stream has ended. */
const START_TIMEOUT_MS = 10_000;
const EXIT_TIMEOUT_MS = 5_000;
const POLL_MS = 10;

/**
 * Opens `request` in the container at `place`. A command or shell runs through `docker exec`,
 * under `/bin/bash` (else `/bin/sh`), on a terminal when one was asked for; sftp is the image's
 * own OpenSSH server; a forward connects to 127.0.0.1 in the container's network namespace,
 * which is all a container with no network has. Rejects with a `ChannelRefused`: `unreachable`
 * for a port nothing listens on there, `refused` for a container that is not running, a user
 * that is root, an image without an sftp server, or anything else that cannot start.
 *
 * @example
 * const ch = await openContainerChannel(docker, place, { kind: 'exec', command: 'nvidia-smi', env: {} });
 * ch.output.pipe(process.stdout);
 */
export async function openContainerChannel(
  docker: Docker,
  place: ContainerPlace,
  request: ChannelRequest,
  opts: ContainerChannelOptions = {},
): Promise<Channel> {
  const user = userOf(place.user);
  const containerPid = await runningPid(docker, place.containerId);
  const at: Target = { docker, place, containerPid, graceMs: opts.closeGraceMs ?? 1_000 };
  switch (request.kind) {
    case 'forward':
      return forward(containerPid, user, request.port, opts);
    case 'sftp':
      return execChannel(at, ['program', await sftpServer(at)], sessionEnv(place, undefined));
    case 'exec':
    case 'shell': {
      const env = sessionEnv(place, undefined, request.env);
      if (request.pty) env.TERM = request.pty.term || env.TERM || 'dumb';
      const launch: Launch = request.kind === 'exec' ? ['command', request.command] : ['login', ''];
      return execChannel(at, launch, env, request.pty);
    }
    default:
      return assertNever(request);
  }
}

/**
 * `uid:gid`, both numbers and neither root's: a name would be looked up in the image's own
 * /etc/passwd, which the image's author writes (`toor:x:0:0`), and Docker gives a bare uid the
 * root group where the image has no entry for it.
 */
function userOf(user: string): { uid: number; gid: number } {
  const match = /^([0-9]{1,10}):([0-9]{1,10})$/.exec(user);
  const [uid, gid] = [Number(match?.[1]), Number(match?.[2])];
  const ok = (id: number) => id > 0 && id < 2 ** 31;
  if (!match || !ok(uid) || !ok(gid))
    throw new ChannelRefused(
      'refused',
      `a channel runs as a uid:gid that is not root's, not ${user}`,
    );
  return { uid, gid };
}

/** The host pid of the container's first process; refused unless the container is running. */
async function runningPid(docker: Docker, id: string): Promise<number> {
  let state: { Running?: boolean; Paused?: boolean; Restarting?: boolean; Pid?: number };
  try {
    state = (await docker.getContainer(id).inspect()).State;
  } catch (err) {
    const missing = (err as { statusCode?: number }).statusCode === 404;
    const why = missing ? 'there is no such container' : (err as Error).message;
    throw new ChannelRefused('refused', `the container ${id} cannot be reached: ${why}`);
  }
  const pid = state.Pid ?? 0;
  if (!state.Running || state.Paused || state.Restarting || pid <= 1)
    throw new ChannelRefused('refused', `the container ${id} is not running`);
  return pid;
}

/** What every exec of a channel shares: the engine, the place and the container's host pid. */
interface Target {
  docker: Docker;
  place: ContainerPlace;
  containerPid: number;
  graceMs: number;
}

/** `LAUNCH`'s mode and argument. */
type Launch = ['login' | 'command' | 'program', string];

/** The first sftp server the image has, found by the session's user; refused when none is. */
async function sftpServer(at: Target): Promise<string> {
  const probe = await execChannel(
    at,
    ['command', FIND_SFTP_SERVER],
    sessionEnv(at.place, undefined),
  );
  probe.input.end();
  probe.errors.resume();
  const said: Buffer[] = [];
  probe.output.on('data', (chunk: Buffer) => said.push(chunk));
  const exit = await probe.exit;
  const server = Buffer.concat(said).toString().trim();
  if (exit.code !== 0 || !server)
    throw new ChannelRefused(
      'refused',
      'the image has no sftp server (install openssh-sftp-server in it)',
    );
  return server;
}

/**
 * `launch` in the container through a `docker exec` on its hijacked connection, as the place's
 * user in its directory, on a terminal of `pty`'s size when one is asked for. It resolves once
 * the process runs, so that a process that could not start (a missing directory, no `/bin/sh`)
 * is refused with what Docker said.
 */
async function execChannel(
  at: Target,
  launch: Launch,
  env: Record<string, string>,
  pty?: PtyRequest,
): Promise<Channel> {
  const tty = pty !== undefined;
  let exec: Docker.Exec;
  let socket: Duplex;
  try {
    exec = await at.docker.getContainer(at.place.containerId).exec({
      Cmd: [
        '/bin/sh',
        '-c',
        LAUNCH,
        'sh',
        ...launch,
        ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
      ],
      User: at.place.user,
      WorkingDir: at.place.dir,
      Env: [],
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: tty,
    });
    socket = await exec.start({ hijack: true, stdin: true, Tty: tty });
  } catch (err) {
    throw new ChannelRefused(
      'refused',
      `could not start in the container: ${(err as Error).message}`,
    );
  }
  socket.on('error', noop);
  const streams = attach(at.docker, socket, tty);
  const proc = await started(exec, socket, streams.output, at.containerPid, tty);

  let size = Promise.resolve();
  const resize = (cols: number, rows: number) => {
    const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= 10_000;
    if (!tty || !ok(cols) || !ok(rows)) return;
    size = size.then(() => exec.resize({ h: rows, w: cols })).catch(noop);
  };
  if (pty) {
    resize(pty.cols, pty.rows);
    await size;
  }

  const status = closed(socket).then(() => exitOf(exec, proc, at.graceMs));
  const done = (s: Readable) => new Promise<void>((resolve) => finished(s, () => resolve()));
  const exit = Promise.all([status, done(streams.output), tty || done(streams.errors)]).then(
    ([status]) => status,
  );
  let closing = false;
  return {
    ...streams,
    resize,
    signal: (name) => proc.signal(name),
    close() {
      if (closing) return;
      closing = true;
      proc.end(at.graceMs);
      streams.input.destroy();
      streams.output.destroy();
      streams.errors.destroy();
      socket.destroy();
    },
    exit,
  };
}

/**
 * An exec's hijacked connection as a channel's streams: on a terminal its bytes are the
 * terminal's; otherwise Docker's frames, split into stdout and stderr. The connection pauses
 * while a reader falls behind, so that the process waits rather than the worker buffering; the
 * client's end-of-file half-closes it, which Docker passes on to the process, except on a
 * terminal, where it is ignored as OpenSSH does.
 */
function attach(
  docker: Docker,
  socket: Duplex,
  tty: boolean,
): { input: Writable; output: Readable; errors: Readable } {
  const behind = (s: Readable) => !s.destroyed && s.readableLength >= s.readableHighWaterMark;
  const flow = () => {
    if (!behind(output) && !behind(errors)) socket.resume();
  };
  const output = new Readable({ read: flow });
  const errors = tty ? ended() : new Readable({ read: flow });
  const into = (stream: Readable) =>
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        if (!stream.destroyed && !stream.push(chunk)) socket.pause();
        callback();
      },
    });
  const toOutput = into(output);
  if (tty) socket.on('data', (chunk: Buffer) => toOutput.write(chunk));
  else docker.modem.demuxStream(socket, toOutput, into(errors));
  socket.resume();
  let over = false;
  socket.once('close', () => {
    if (over) return;
    over = true;
    for (const stream of tty ? [output] : [output, errors])
      if (!stream.destroyed) stream.push(null);
  });

  const input = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (!socket.writable) return callback();
      socket.write(chunk, () => callback());
    },
    final(callback) {
      if (!tty && socket.writable) socket.end();
      callback();
    },
  });
  return { input, output, errors };
}

/**
 * Waits for the exec's process to run: Docker gives the exec a pid once it has. An exec that
 * ended with none never started, and what Docker said of it is on its stream.
 */
async function started(
  exec: Docker.Exec,
  socket: Duplex,
  output: Readable,
  containerPid: number,
  tty: boolean,
): Promise<ExecProcess> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const info = await exec.inspect().catch(() => undefined);
    if (info && info.Pid > 0) return ExecProcess.of(info.Pid, containerPid, tty);
    const failed = info !== undefined && !info.Running && info.ExitCode !== null;
    if (failed || Date.now() > deadline) {
      if (failed) await Promise.race([closed(socket), sleep(1_000)]);
      socket.destroy();
      const said = String((output.read() as Buffer | null) ?? '').trim();
      const why = said || (failed ? `it exited with ${info.ExitCode}` : 'it did not start in time');
      throw new ChannelRefused('refused', `could not start in the container: ${why}`);
    }
    await sleep(POLL_MS);
  }
}

/** How the exec ended, once Docker has seen it end. */
async function exitOf(exec: Docker.Exec, proc: ExecProcess, graceMs: number): Promise<ChannelExit> {
  const deadline = Date.now() + graceMs + EXIT_TIMEOUT_MS;
  for (;;) {
    try {
      const info = await exec.inspect();
      if (!info.Running && info.ExitCode !== null) return proc.exit(info.ExitCode);
    } catch (err) {
      return { code: null, signal: null, error: `the exec is gone: ${(err as Error).message}` };
    }
    if (Date.now() > deadline)
      return { code: null, signal: null, error: 'the process had not ended' };
    await sleep(POLL_MS);
  }
}
