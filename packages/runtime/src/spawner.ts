import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Socket } from 'node:net';
import { isJobId, PERL_SPAWNER } from './perl-spawner.ts';

export class SpawnError extends Error {
  override name = 'SpawnError';
}

/** A script the spawner is starting. `ended` settles with its status, or null when none can tell it. */
export interface Launched {
  pid: Promise<number>;
  ended: Promise<number | null>;
}

interface Launch {
  /** The process group, once `started` came: from then on only `ended` settles the launch. */
  pid: number | null;
  started(pid: number): void;
  failed(err: Error): void;
  ended(status: number | null): void;
}

/** How often a started script is checked for once its spawner has gone without its end. */
const GONE_CHECK_MS = 1_000;

/** The executable `name` in an absolute directory of `path`, the first one; null when none. */
function onPath(name: string, path: string): string | null {
  for (const dir of path.split(':')) {
    if (!isAbsolute(dir)) continue;
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      if (statSync(file).isFile()) return file;
    } catch {
      continue;
    }
  }
  return null;
}

/** Whether process `pid` runs: a zombie (ended, not yet reaped by its new parent) does not. */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * A small Perl process that starts attempts for a large process, which would otherwise copy its
 * whole address space on every fork. It reads `run ID LAUNCH` lines, where LAUNCH is a launch file
 * (see `launchScript`). As the worker it enters the work directory and opens the log (the attempt's
 * user can write neither file), then forks once: the child starts a session of its own and becomes
 * `/bin/sh SCRIPT`; for an attempt of a user of its own, it first enters new PID and mount
 * namespaces and forks their first process, which mounts a /proc of its own (and, unless the
 * sandbox is under them, /tmp and /dev/shm), drops every capability, takes the attempt's uid and
 * gid with no new privileges and becomes the script, while the child waits for it and ends as it
 * did. It records the process group and says `started ID PID` on its stdout, then, once it has
 * reaped the script, records the status and says `ended ID STATUS` (128 + the signal, for a script
 * killed by one). What it cannot start it records as a launch error and says `failed ID WHY`. Each
 * line is one short write, which a pipe keeps whole. An `end ID UID` line ends every process of an
 * unprivileged uid (see `Spawner.endUser`) and says `ended ID STATUS`. Once its stdin closes, the
 * spawner waits for every script it started and records its status: a started script outlives the
 * worker, and still has its end recorded.
 */
class SpawnerProcess {
  readonly #child: ChildProcess | null = null;
  readonly #words: Socket | null = null;
  readonly #launches = new Map<string, Launch>();
  #fatal: string | null = null;
  #gone = false;

  constructor(
    env: Record<string, string>,
    private readonly onGone: () => void,
  ) {
    const perl = onPath('perl', env.PATH ?? '');
    if (!perl) {
      this.#fatal = 'perl (perl-base) is not installed';
      queueMicrotask(() => this.#ended());
      return;
    }
    this.#child = spawn(perl, ['-e', PERL_SPAWNER], {
      env,
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    this.#child.unref();
    this.#child.stdin!.on('error', () => undefined);
    this.#child.once('error', (err) => {
      this.#fatal ??= `the spawner could not start: ${err.message}`;
      this.#ended();
    });
    this.#words = this.#child.stdout as Socket;
    this.#words.unref();
    createInterface({ input: this.#words }).on('line', (line) => this.#heard(line));
    this.#words.once('close', () => this.#ended());
  }

  #heard(line: string): void {
    const [kind, id, value] = line.split(' ');
    const launch = id === undefined ? undefined : this.#launches.get(id);
    if (!launch) return;
    if (kind === 'failed') {
      this.#settle(id!, null, new SpawnError(line.slice(`failed ${id} `.length)));
      return;
    }
    const n = Number(value);
    if (!Number.isInteger(n)) return;
    if (kind === 'started') {
      launch.pid = n;
      launch.started(n);
    }
    if (kind === 'ended') this.#settle(id!, n);
  }

  /** Settles a launch: with its status, or with null (and `err`, if it never started). */
  #settle(id: string, status: number | null, err?: Error): void {
    const launch = this.#launches.get(id);
    if (!launch) return;
    this.#launches.delete(id);
    this.#hold();
    if (err) launch.failed(err);
    launch.ended(status);
  }

  /**
   * The spawner has gone, and said all it will. What it never started never will be (a child
   * runs its script only once the spawner said `started`); a started script runs on, and is
   * settled with null once its first process has ended (checked every second), as the spawner
   * would have said, so that its end is read from what its script recorded.
   */
  #ended(): void {
    if (this.#gone) return;
    this.#gone = true;
    this.onGone();
    for (const [id, launch] of this.#launches) {
      if (launch.pid === null)
        this.#settle(
          id,
          null,
          new SpawnError(this.#fatal ?? 'the spawner ended before it started the command'),
        );
    }
    if (this.#launches.size === 0) return;
    const timer = setInterval(() => {
      for (const [id, launch] of this.#launches) if (!running(launch.pid!)) this.#settle(id, null);
      if (this.#launches.size === 0) clearInterval(timer);
    }, GONE_CHECK_MS);
  }

  /** Sends a command line for the launch `id`, or fails it once the spawner has gone. */
  send(id: string, command: string, launch: Launch): void {
    this.#launches.set(id, launch);
    if (this.#gone) {
      this.#settle(id, null, new SpawnError(this.#fatal ?? 'the spawner ended'));
      return;
    }
    this.#hold();
    this.#child?.stdin!.write(`${command}\n`);
  }

  /** Lets the spawner go: it exits once what it started has ended. */
  close(): void {
    this.#child?.stdin!.end();
  }

  /** Keeps the process alive while a launch waits to start or to end, and only then. */
  #hold(): void {
    if (this.#launches.size > 0) this.#words?.ref();
    else this.#words?.unref();
  }
}

/**
 * Starts scripts through a spawner, started on first use and again once it has gone. The
 * spawner holds no handle open: a process with nothing else to do still exits.
 */
export class Spawner {
  #process: SpawnerProcess | null = null;
  #next = 0;

  /** `env` is what the spawner, and so every script, starts with. */
  constructor(private readonly env: Record<string, string>) {}

  #current(): SpawnerProcess {
    const spawner: SpawnerProcess = (this.#process ??= new SpawnerProcess(this.env, () => {
      if (this.#process === spawner) this.#process = null;
    }));
    return spawner;
  }

  /** Starts the attempt a launch file describes (see `launchScript`). */
  launch(launchFile: string): Launched {
    if (/[\n\r]/.test(launchFile))
      throw new SpawnError(`a launch file's path holds a newline: ${launchFile}`);
    let launch!: Launch;
    const pid = new Promise<number>((started, failed) => {
      launch = { pid: null, started, failed, ended: () => undefined };
    });
    const ended = new Promise<number | null>((resolve) => (launch.ended = resolve));
    pid.catch(() => undefined);
    const id = String(++this.#next);
    this.#current().send(id, `run ${id} ${launchFile}`, launch);
    return { pid, ended };
  }

  /**
   * Ends every process running as `uid`: a shell started as that uid (through `setpriv`, which
   * runs nothing when it cannot switch) sends SIGKILL to every process it may signal, which for
   * an unprivileged uid is that uid's own. Refuses uids outside `JOB_IDS`. Settles with the status.
   */
  endUser(uid: number): Promise<number | null> {
    if (!isJobId(uid))
      return Promise.reject(new SpawnError(`refusing to end the processes of uid ${uid}`));
    return new Promise((resolve) => {
      const launch: Launch = {
        pid: null,
        started: () => undefined,
        failed: () => undefined,
        ended: resolve,
      };
      const id = String(++this.#next);
      this.#current().send(id, `end ${id} ${uid}`, launch);
    });
  }

  /** Lets the spawner go; the scripts it started run on, and it still reports their ends. */
  close(): void {
    this.#process?.close();
    this.#process = null;
  }
}
