/**
 * Channels backed by a process: a command or shell on pipes or on a terminal. Each process leads
 * a session (and process group) of its own, which is what signals and `close()` reach.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { closeSync, constants as fsc, openSync, write } from 'node:fs';
import { constants } from 'node:os';
import { type Duplex, finished, Readable, Writable } from 'node:stream';
import * as pty from 'node-pty';
import { type Channel, type ChannelExit, ChannelRefused, type PtyRequest } from '@trainyard/tunnel';
import { sessionGroups, SSH_SIGNALS, statOf, type Stat } from './proc.ts';
import { PERL, type SessionUser, trampoline } from './trampoline.ts';

/** A program to run in a channel: its argv, directory, environment and user. */
export interface ChannelCommand {
  argv: [string, ...string[]];
  cwd: string;
  env: Record<string, string>;
  /** Whom it runs as: a uid and gid, and the line of /etc/passwd that names them to it. */
  user?: SessionUser;
  /** How long `close()` waits after SIGTERM before SIGKILL. */
  graceMs: number;
}

/** A signal's SSH name (`TERM`) from Node's name (`SIGTERM`) or its number. */
function sshName(signal: NodeJS.Signals | number | null | undefined): string | null {
  if (!signal) return null;
  const name =
    typeof signal === 'number'
      ? Object.entries(constants.signals).find(([, n]) => n === signal)?.[0]
      : signal;
  return name ? name.replace(/^SIG/, '') : String(signal);
}

function killGroup(group: number, signal: NodeJS.Signals): void {
  try {
    if (group > 1) process.kill(-group, signal);
  } catch {
    // Gone meanwhile.
  }
}

/**
 * The session a channel's process leads. Signals go to its process group while it leads it (a
 * reused pid never does), and on a terminal to the foreground job too; `end` reaches every
 * group in the session: HUP (on a terminal), TERM and CONT, then KILL after the grace.
 */
class Leader {
  #ending = false;
  readonly #start: number | undefined;

  constructor(
    readonly pid: number,
    private readonly terminal: boolean,
  ) {
    this.#start = statOf(pid)?.start;
  }

  /** Whether `stat` is of this leader, not of a process that has its pid since. */
  #ours(stat: Stat): boolean {
    return stat.session === this.pid && (this.#start === undefined || stat.start === this.#start);
  }

  /** Whether the leader still runs (not gone, not a zombie). */
  alive(): boolean {
    const stat = statOf(this.pid);
    return stat !== null && this.#ours(stat) && stat.state !== 'Z';
  }

  signal(name: string): void {
    if (!SSH_SIGNALS.has(name)) return;
    const stat = statOf(this.pid);
    if (!stat || !this.#ours(stat)) return;
    const signal = `SIG${name}` as NodeJS.Signals;
    killGroup(this.pid, signal);
    if (this.terminal && stat.foreground > 0 && stat.foreground !== this.pid)
      killGroup(stat.foreground, signal);
  }

  end(graceMs: number): void {
    if (this.#ending) return;
    this.#ending = true;
    const head = statOf(this.pid);
    if (head && !this.#ours(head)) return;
    const all = async (...signals: NodeJS.Signals[]) => {
      const groups = await sessionGroups(this.pid);
      // A pid taken by another process since: the session id, and what was found of it, is
      // that one's now.
      const now = statOf(this.pid);
      if (now && !this.#ours(now)) return;
      for (const group of groups) for (const signal of signals) killGroup(group, signal);
    };
    // A terminal's shell ignores TERM but not HUP; CONT lets a stopped job see the signal.
    const first: NodeJS.Signals[] = this.terminal ? ['SIGHUP', 'SIGTERM'] : ['SIGTERM'];
    void all(...first, 'SIGCONT')
      .catch(() => undefined)
      .then(() => {
        setTimeout(() => void all('SIGKILL').catch(() => undefined), graceMs).unref();
      });
  }
}

/** A stream with nothing in it, already at its end. */
export function ended(): Readable {
  const stream = new Readable({ read() {} });
  stream.push(null);
  return stream;
}

/** Settles once `stream` has ended, errored or been destroyed. */
function done(stream: Readable): Promise<void> {
  return new Promise((resolve) => finished(stream, () => resolve()));
}

/** Settles once `stream` has closed, whether it ended or broke. */
export function closed(stream: Readable | Duplex): Promise<void> {
  return new Promise((resolve) => {
    if (stream.closed) resolve();
    else stream.once('close', () => resolve());
  });
}

export const noop = () => {};

/**
 * `command` on pipes, in a session of its own (`detached`): stdout and stderr as Node's own
 * streams, whose backpressure stops reading the pipe, and so the writer, when nobody reads.
 */
export async function pipeChannel(command: ChannelCommand): Promise<Channel> {
  const { args, env } = trampoline(command.argv, command.env, command.user);
  let child: ChildProcessWithoutNullStreams;
  try {
    child = spawn(PERL, args, { cwd: command.cwd, env, detached: true, stdio: 'pipe' });
  } catch (err) {
    throw new ChannelRefused(
      'refused',
      `could not start ${command.argv[0]}: ${(err as Error).message}`,
    );
  }
  child.on('error', noop);
  child.stdin.on('error', noop);
  child.stdout.on('error', noop);
  child.stderr.on('error', noop);
  const exit = new Promise<ChannelExit>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal: sshName(signal) })),
  );
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err) =>
      reject(new ChannelRefused('refused', `could not start ${command.argv[0]}: ${err.message}`)),
    );
  });
  const leader = new Leader(child.pid!, false);
  return {
    input: child.stdin,
    output: child.stdout,
    errors: child.stderr,
    resize: noop,
    signal: (name) => leader.signal(name),
    close() {
      leader.end(command.graceMs);
      child.stdin.destroy();
      child.stdout.destroy();
      child.stderr.destroy();
    },
    exit,
  };
}

/** How often a paused terminal checks whether its process has exited (see `PtyFlow`). */
const PAUSED_CHECK_MS = 20;

/**
 * Reading a node-pty terminal to its end, with backpressure. On Linux a terminal hands over at
 * most 4 KiB a read; libuv takes a short read that comes with the hang-up of the terminal's last
 * close for its end, and what the kernel still holds is lost (microsoft/node-pty#726). So the
 * worker holds the terminal's other side open until the channel ends: no hang-up comes, and
 * node-pty ends the stream 200 ms after the process exits. Paused when the consumer falls behind,
 * it reads on regardless once the process has exited, so that those 200 ms suffice: what is
 * left then is what the kernel holds.
 */
class PtyFlow {
  paused = false;
  #drain = false;
  #hold: number | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly term: pty.IPty,
    private readonly leader: Leader,
  ) {
    const pts = (term as unknown as { ptsName?: unknown }).ptsName;
    if (typeof pts === 'string' && pts.startsWith('/dev/pts/')) {
      try {
        this.#hold = openSync(pts, fsc.O_RDWR | fsc.O_NOCTTY | fsc.O_NONBLOCK);
      } catch {
        // Already gone: there is nothing left to read.
      }
    }
  }

  pause(): void {
    if (this.paused || this.#drain) return;
    this.paused = true;
    this.term.pause();
    this.#timer ??= setInterval(() => {
      if (this.leader.alive()) return;
      this.#drain = true;
      this.resume();
    }, PAUSED_CHECK_MS).unref();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.term.resume();
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Reads on to the end, lets go of the terminal and stops watching. */
  stop(): void {
    this.resume();
    if (this.#hold !== undefined) closeSync(this.#hold);
    this.#hold = undefined;
  }
}

/** How long a write to a full terminal waits before it tries again. */
const FULL_TERMINAL_RETRY_MS = 10;

/**
 * Bytes to a terminal, written to its master with backpressure: a write's callback waits until
 * the kernel took all of it, so a program that sets its terminal raw and never reads it stops
 * the writer (and its sender) once the terminal's buffer is full, and a full terminal is looked
 * at again every 10 ms, not spun on. node-pty's own `write` is never used: it queues without
 * limit, never says when bytes have gone, retries a full terminal on every turn of the event
 * loop, and goes on writing what it queued to the descriptor number after the terminal closed
 * it. Here nothing is written once `open` says the terminal hung up, exited or was closed.
 */
function terminalInput(fd: number, open: () => boolean): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      let offset = 0;
      const next = () => {
        if (!open()) return callback();
        write(fd, chunk, offset, chunk.length - offset, null, (err, written) => {
          if (err?.code === 'EAGAIN') return void setTimeout(next, FULL_TERMINAL_RETRY_MS);
          // Any other error is the terminal gone: the rest is dropped, as a closed one would.
          offset += err ? chunk.length : written;
          if (offset < chunk.length) next();
          else callback();
        });
      };
      next();
    },
  });
}

/**
 * `command` on a terminal of its own, through node-pty, with bytes kept as bytes, paused while
 * the consumer falls behind (see `PtyFlow`). The client's end-of-file is ignored, as OpenSSH does
 * for a terminal; stderr is the terminal.
 */
export function ptyChannel(command: ChannelCommand, size: PtyRequest): Channel {
  const { args, env } = trampoline(command.argv, command.env, command.user);
  let term: pty.IPty;
  try {
    term = pty.spawn(PERL, args, {
      name: command.env.TERM ?? 'dumb',
      cols: size.cols,
      rows: size.rows,
      cwd: command.cwd,
      env,
      encoding: null,
    });
  } catch (err) {
    throw new ChannelRefused('refused', `could not start a terminal: ${(err as Error).message}`);
  }
  // The terminal's master, non-blocking: node-pty's `fd` (Unix), not in its typings.
  const { fd } = term as pty.IPty & { fd?: unknown };
  if (typeof fd !== 'number') {
    term.kill('SIGKILL');
    throw new ChannelRefused('refused', 'the terminal gave no descriptor to write to');
  }
  const leader = new Leader(term.pid, true);
  const flow = new PtyFlow(term, leader);
  let exited = false;
  let closed = false;

  const output = new Readable({ read: () => flow.resume() });
  term.onData((data: string | Buffer) => {
    if (!output.destroyed && !output.push(data)) flow.pause();
  });
  // node-pty's word that the terminal hung up, given before it closes the descriptor.
  let hungUp = false;
  const { on } = term as pty.IPty & { on?: (event: 'close', listener: () => void) => void };
  on?.call(term, 'close', () => (hungUp = true));
  const input = terminalInput(fd, () => !exited && !closed && !hungUp);

  const status = new Promise<ChannelExit>((resolve) =>
    term.onExit(({ exitCode, signal }) => {
      exited = true;
      flow.stop();
      if (!output.destroyed) output.push(null);
      resolve(signal ? { code: null, signal: sshName(signal) } : { code: exitCode, signal: null });
    }),
  );
  const exit = Promise.all([status, done(output)]).then(([status]) => status);

  return {
    input,
    output,
    errors: ended(),
    resize(cols, rows) {
      const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= 10_000;
      if (exited || closed || !ok(cols) || !ok(rows)) return;
      try {
        term.resize(cols, rows);
      } catch {
        // The terminal closed meanwhile.
      }
    },
    signal: (name) => leader.signal(name),
    close() {
      if (closed) return;
      closed = true;
      leader.end(command.graceMs);
      input.destroy();
      output.destroy();
      // Read on to the terminal's end, so that node-pty closes it once the process is gone.
      flow.stop();
    },
    exit,
  };
}
