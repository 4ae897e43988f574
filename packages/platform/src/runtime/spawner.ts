import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';

/**
 * A small shell that starts scripts in new sessions for a large process, which would otherwise
 * copy its whole address space on every fork. It reads `ID SCRIPT` lines; for each it forks a
 * waiter and says `forked ID` on its stdout. The waiter starts `setsid /bin/sh SCRIPT`, says
 * `started ID PID` on fd 3, waits for it and says `ended ID STATUS` (128 + the signal, for a
 * script killed by one). Each line is one short write, which a pipe keeps whole. Waiters outlive
 * the shell, so their lines arrive after it has gone; a started script outlives both.
 */
const SPAWNER = [
  'command -v setsid >/dev/null 2>&1 || { echo "fatal setsid (util-linux) is not installed"; exit 1; }',
  'while read -r __ty_id __ty_script; do',
  '  { setsid /bin/sh "$__ty_script" </dev/null >/dev/null 2>&1 3>&- & echo "started $__ty_id $!"; wait $!; echo "ended $__ty_id $?"; } >&3 &',
  '  echo "forked $__ty_id"',
  'done',
].join('\n');

/** How long a launch may still start after its spawner shell has gone. */
const UNFORKED_GRACE_MS = 1_000;

export class SpawnError extends Error {
  override name = 'SpawnError';
}

/** A script the spawner is starting. `ended` settles with its status, or null when none can tell it. */
export interface Launched {
  pid: Promise<number>;
  ended: Promise<number | null>;
}

interface Launch {
  forked: boolean;
  /** Whether `started` came: from then on only `ended` settles the launch. */
  running: boolean;
  started(pid: number): void;
  failed(err: Error): void;
  ended(status: number | null): void;
}

function lines(stream: Readable, onLine: (words: string[], line: string) => void): void {
  createInterface({ input: stream }).on('line', (line) => onLine(line.split(' '), line));
}

/** One spawner shell and the launches made through it. */
class Shell {
  readonly child: ChildProcess;
  readonly #launches = new Map<string, Launch>();
  readonly #waiters: Socket;
  #fatal: string | null = null;

  constructor(env: Record<string, string>, onGone: () => void) {
    this.child = spawn('/bin/sh', ['-c', SPAWNER, 'trainyard-spawner'], {
      env,
      stdio: ['pipe', 'pipe', 'ignore', 'pipe'],
    });
    this.child.unref();
    this.child.stdin!.on('error', () => undefined);
    const own = this.child.stdout!;
    const waiters = this.child.stdio[3] as Socket;
    this.#waiters = waiters;
    (own as Socket).unref();
    waiters.unref();
    lines(own, ([kind, id], line) => {
      if (kind === 'fatal') this.#fatal = line.slice('fatal '.length);
      const launch = kind === 'forked' && id ? this.#launches.get(id) : undefined;
      if (launch) launch.forked = true;
    });
    lines(waiters, ([kind, id, value]) => {
      const launch = id === undefined ? undefined : this.#launches.get(id);
      const n = Number(value);
      if (!launch || !Number.isInteger(n)) return;
      if (kind === 'started') {
        launch.running = true;
        launch.started(n);
      }
      if (kind === 'ended') {
        this.#launches.delete(id!);
        this.#hold();
        launch.ended(n);
      }
    });
    this.child.once('error', (err) => {
      this.#fatal ??= `the spawner shell could not start: ${err.message}`;
    });
    const ownClosed = new Promise<void>((resolve) => own.once('close', resolve));
    void ownClosed.then(() => {
      onGone();
      setTimeout(() => this.#failUnstarted(), UNFORKED_GRACE_MS).unref();
    });
    waiters.once('close', () => {
      void ownClosed.then(() => {
        for (const launch of this.#launches.values()) {
          launch.failed(new SpawnError(this.#fatal ?? 'the command was not started'));
          launch.ended(null);
        }
        this.#launches.clear();
      });
    });
  }

  /**
   * Fails the launches that a gone shell never said it forked and that never started. The
   * shell may have died between the fork and its word, so such a waiter gets a grace to start.
   */
  #failUnstarted(): void {
    for (const [id, launch] of this.#launches) {
      if (launch.forked || launch.running) continue;
      this.#launches.delete(id);
      launch.failed(new SpawnError(this.#fatal ?? 'the spawner shell ended'));
      launch.ended(null);
    }
    this.#hold();
  }

  launch(id: string, script: string, launch: Launch): void {
    this.#launches.set(id, launch);
    this.#hold();
    this.child.stdin!.write(`${id} ${script}\n`);
  }

  /** Keeps the process alive while a launch waits to start or to end, and only then. */
  #hold(): void {
    if (this.#launches.size > 0) this.#waiters.ref();
    else this.#waiters.unref();
  }
}

/**
 * Starts scripts through a spawner shell, started on first use and again once it has gone.
 * The shell holds no handle open: a process with nothing else to do still exits.
 */
export class Spawner {
  #shell: Shell | null = null;
  #next = 0;

  /** `env` is what the shell, and so every script, starts with. */
  constructor(private readonly env: Record<string, string>) {}

  launch(script: string): Launched {
    if (script.includes('\n')) throw new SpawnError(`a script path holds a newline: ${script}`);
    const shell = (this.#shell ??= new Shell(this.env, () => {
      if (this.#shell === shell) this.#shell = null;
    }));
    let launch!: Launch;
    const pid = new Promise<number>((started, failed) => {
      launch = { forked: false, running: false, started, failed, ended: () => undefined };
    });
    const ended = new Promise<number | null>((resolve) => (launch.ended = resolve));
    pid.catch(() => undefined);
    shell.launch(String(++this.#next), script, launch);
    return { pid, ended };
  }

  /** Ends the spawner shell; the scripts it started run on, and their waiters still report. */
  close(): void {
    this.#shell?.child.stdin!.end();
    this.#shell = null;
  }
}
