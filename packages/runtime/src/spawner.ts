import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { shellQuote } from './shell.ts';

/**
 * A small shell that starts attempts for a large process, which would otherwise copy its whole
 * address space on every fork. It reads `run ID LAUNCH` lines, where LAUNCH is a file of shell
 * assignments (see `launchScript`); for each it forks a waiter and says `forked ID` on its
 * stdout. The waiter enters the work directory and opens the log (as the worker: the attempt's
 * user cannot write either file), starts `setsid /bin/sh SCRIPT` there (through `setpriv`, as
 * the attempt's user, when one is named), records the process group and says `started ID PID`
 * on fd 3, waits, records the status and says `ended ID STATUS` (128 + the signal, for a script
 * killed by one). What it cannot start it records as a launch error and says `failed ID WHY`. Each line
 * is one short write, which a pipe keeps whole. Waiters outlive the shell, so their lines arrive
 * after it has gone; a started script outlives both. An `end ID UID` line ends every process of
 * an unprivileged uid (see `Spawner.endUser`) and says `ended ID STATUS`.
 */
/**
 * The first process of an attempt that runs as a user of its own, as root, in new PID and mount
 * namespaces: the attempt sees only its own processes (not their command lines or environment),
 * and, unless its sandbox is under one of them, /tmp and /dev/shm of its own, gone when it ends.
 * It becomes the attempt's script as the attempt's user; when that first process ends, the
 * kernel ends whatever is left in the namespace.
 */
const ATTEMPT_INIT = [
  'if [ "$4" = 1 ]; then',
  '  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || exit 126',
  '  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || exit 126',
  'fi',
  'exec setpriv --reuid="$1" --regid="$2" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all /bin/sh "$3"',
].join('\n');

const SPAWNER = [
  'command -v setsid >/dev/null 2>&1 || { echo "fatal setsid (util-linux) is not installed"; exit 1; }',
  'umask 077',
  `__ty_inner=${shellQuote(ATTEMPT_INIT)}`,
  'while read -r __ty_kind __ty_id __ty_launch; do',
  '  if [ "$__ty_kind" = end ]; then',
  '    case "$__ty_launch" in *[!0-9]*|"") echo "ended $__ty_id 2" >&3; continue ;; esac',
  '    if [ "$__ty_launch" -lt 1000 ]; then echo "ended $__ty_id 2" >&3; continue; fi',
  '    { setpriv --reuid="$__ty_launch" --regid="$__ty_launch" --clear-groups --no-new-privs /bin/sh -c "kill -9 -1 2>/dev/null; exit 0" </dev/null >/dev/null 2>&1 3>&-; echo "ended $__ty_id $?"; } >&3 &',
  '    echo "forked $__ty_id"',
  '    continue',
  '  fi',
  '  {',
  '    . "$__ty_launch"',
  '    if ! cd "$TY_WORK" 2>/dev/null; then',
  '      echo "launch-error cannot enter the work directory" > "$TY_EXIT"; echo "failed $__ty_id cannot enter the work directory"',
  '    elif ! { : >>"$TY_LOG"; } 2>/dev/null; then',
  '      echo "launch-error cannot open the log file" > "$TY_EXIT"; echo "failed $__ty_id cannot open the log file"',
  '    elif [ -n "$TY_UID" ] && ! { command -v setpriv && command -v unshare; } >/dev/null 2>&1; then',
  '      echo "launch-error setpriv and unshare (util-linux) are needed" > "$TY_EXIT"; echo "failed $__ty_id setpriv and unshare (util-linux) are needed"',
  '    else',
  '      if [ -n "$TY_UID" ]; then',
  '        setsid unshare --pid --fork --mount-proc --propagation private /bin/sh -c "$__ty_inner" trainyard-attempt "$TY_UID" "$TY_GID" "$TY_SCRIPT" "$TY_PRIVATE_TMP" </dev/null >>"$TY_LOG" 2>&1 3>&- &',
  '      else',
  '        setsid /bin/sh "$TY_SCRIPT" </dev/null >>"$TY_LOG" 2>&1 3>&- &',
  '      fi',
  '      __ty_pid=$!',
  '      echo "$__ty_pid" > "$TY_PID"',
  '      echo "started $__ty_id $__ty_pid"',
  '      wait "$__ty_pid"; __ty_status=$?',
  '      echo "status $__ty_status" > "$TY_EXIT"',
  '      echo "ended $__ty_id $__ty_status"',
  '    fi',
  '  } >&3 &',
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
    lines(waiters, ([kind, id, value], line) => {
      const launch = id === undefined ? undefined : this.#launches.get(id);
      if (launch && kind === 'failed') {
        this.#launches.delete(id!);
        this.#hold();
        launch.failed(new SpawnError(line.slice(`failed ${id} `.length)));
        launch.ended(null);
        return;
      }
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

  /** Ends every process of an unprivileged uid (see `Spawner.endUser`). */
  endUser(id: string, uid: number, launch: Launch): void {
    this.#launches.set(id, launch);
    this.#hold();
    this.child.stdin!.write(`end ${id} ${uid}\n`);
  }

  launch(id: string, launchFile: string, launch: Launch): void {
    this.#launches.set(id, launch);
    this.#hold();
    this.child.stdin!.write(`run ${id} ${launchFile}\n`);
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

  /** Starts the attempt a launch file describes (see `launchScript`). */
  launch(launchFile: string): Launched {
    if (/[\n\r]/.test(launchFile))
      throw new SpawnError(`a launch file's path holds a newline: ${launchFile}`);
    const shell = (this.#shell ??= new Shell(this.env, () => {
      if (this.#shell === shell) this.#shell = null;
    }));
    let launch!: Launch;
    const pid = new Promise<number>((started, failed) => {
      launch = { forked: false, running: false, started, failed, ended: () => undefined };
    });
    const ended = new Promise<number | null>((resolve) => (launch.ended = resolve));
    pid.catch(() => undefined);
    shell.launch(String(++this.#next), launchFile, launch);
    return { pid, ended };
  }

  /**
   * Ends every process running as `uid`: a shell started as that uid (through `setpriv`, which
   * runs nothing when it cannot switch) sends SIGKILL to every process it may signal, which for
   * an unprivileged uid is that uid's own. Refuses uids below 1000. Settles with the status.
   */
  endUser(uid: number): Promise<number | null> {
    if (!Number.isInteger(uid) || uid < 1000)
      return Promise.reject(new SpawnError(`refusing to end the processes of uid ${uid}`));
    const shell = (this.#shell ??= new Shell(this.env, () => {
      if (this.#shell === shell) this.#shell = null;
    }));
    return new Promise((resolve) => {
      const launch: Launch = {
        forked: false,
        running: true,
        started: () => undefined,
        failed: () => undefined,
        ended: resolve,
      };
      shell.endUser(String(++this.#next), uid, launch);
    });
  }

  /** Ends the spawner shell; the scripts it started run on, and their waiters still report. */
  close(): void {
    this.#shell?.child.stdin!.end();
    this.#shell = null;
  }
}
