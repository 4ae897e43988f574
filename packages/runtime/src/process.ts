import { constants as osConstants } from 'node:os';
import { chownSync, closeSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { ProcessExit } from '@trainyard/domain';
import { shellQuote } from './shell.ts';
import { isJobId, LAUNCH_FIELDS, NOT_JOB_IDS } from './perl-spawner.ts';
import { probeExports } from './probe.ts';
import { SpawnError, Spawner, type Launched } from './spawner.ts';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import { openLocalChannel } from './session-channels.ts';
import { attemptEnv, hostEnv, SAFE_PATH } from './env.ts';
import { FileTail, openJobFile } from './file-tail.ts';
import { MemoryCgroups } from './memory-cgroup.ts';
import type { LogStreamName, RunningAttempt, RunSpec, Runtime } from './types.ts';

function signalGroup(pid: number, signal: NodeJS.Signals | 0): boolean {
  return signalProcess(-pid, signal);
}

function signalProcess(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** The status a script that ran `setup` and saw it fail ends with; the result file says more. */
const SETUP_FAILED = 125;

export { shellQuote } from './shell.ts';

/**
 * The script that runs one attempt (`RunSpec.scriptFile`), as the attempt's user, in a new
 * session, in the work directory, with its output already sent to the log (the runtime's
 * spawner did those, as the worker). It sets the attempt's environment, runs `setup` if there
 * is one, then the command, each in a subshell (a fork, no new program), and records how it
 * ended in the result file. It ends with its command's exit code; a failed setup ends it with
 * `SETUP_FAILED`.
 *
 * A stop is SIGTERM (or SIGINT, SIGHUP) to the attempt. Most attempts hear it through their
 * process group. An attempt of a user of its own hears it through the spawner's child, which
 * passes it to the script once the script's trap is set (the first process of a PID namespace
 * drops a signal it has no handler for); the script then sends it to its whole process group.
 */
export function attemptScript(spec: RunSpec, host: NodeJS.ProcessEnv = process.env): string {
  const env = Object.entries(attemptEnv(spec, host)).map(
    ([name, value]) => `export ${shellQuote(`${name}=${value}`)}`,
  );
  const result = shellQuote(spec.resultFile);
  const setup = spec.setup
    ? [
        `echo "[trainyard] running setup"`,
        `__ty_run ${shellQuote(spec.setup)}`,
        `[ "$__ty_code" -eq 0 ] || { echo "setup-failed $__ty_code" > ${result}; exit ${SETUP_FAILED}; }`,
      ]
    : [];
  return [
    ...env,
    run(spec.user ? STOP_ISOLATED : STOP_GROUP),
    ...setup,
    ...probeExports(spec),
    `__ty_run ${shellQuote(spec.command)}`,
    `if [ -n "$__ty_stopped" ] && [ "$__ty_code" -gt 128 ]; then echo "signal $((__ty_code - 128))" > ${result}; else echo "exit $__ty_code" > ${result}; fi`,
    'exit "$__ty_code"',
    '',
  ].join('\n');
}

/** What the trap does on a stop where the process group hears it: the subshell hears it again. */
const STOP_GROUP = '__ty_stopped=1; kill -TERM "$__ty_child" 2>/dev/null';

/**
 * What the trap does on a stop where the script alone hears it (passed on by the spawner's
 * child): the first sends it to the whole process group, the script's own copy included.
 */
const STOP_ISOLATED = '[ -n "$__ty_stopped" ] || { __ty_stopped=1; kill -TERM 0 2>/dev/null; }';

/**
 * Runs a command in a subshell and waits for it, with a trap on SIGTERM, SIGINT and SIGHUP
 * (`stop`) while it runs: the script may be the first process of a PID namespace, which ignores
 * a signal it has no trap for, and a stopping attempt must hear SIGTERM to save its work. The
 * trap is set once the subshell is forked, so the subshell starts with each signal at its
 * default; a subshell forked after a stop ends as SIGTERM would end it (143), without running
 * its command.
 */
function run(stop: string): string {
  return [
    '__ty_run() {',
    '  __ty_torun=$1',
    '  (set --; [ -z "$__ty_stopped" ] || exit 143; eval "$__ty_torun") & __ty_child=$!',
    `  trap '${stop}' TERM INT HUP`,
    '  while :; do wait "$__ty_child"; __ty_code=$?; kill -0 "$__ty_child" 2>/dev/null || break; done',
    '  trap - TERM INT HUP',
    '}',
  ].join('\n');
}

/** Whether `path` lies in /tmp or /dev/shm, which an attempt cannot have private copies of then. */
export function underSharedTmp(path: string): boolean {
  return /^\/(tmp|dev\/shm)(\/|$)/.test(path);
}

/**
 * What the spawner needs for one attempt, read (as the worker, before it drops to the attempt's
 * user) as data and never run: where to run, where the output, the process group and the end go,
 * and whom to run as. One `NAME=value` entry per field, each ended by a NUL, which no path holds.
 */
export function launchScript(spec: RunSpec, cgroupProcs = ''): string {
  const fields: Record<(typeof LAUNCH_FIELDS)[number], string> = {
    TY_WORK: spec.workDir,
    TY_LOG: spec.logFile,
    TY_PID: spec.pidFile,
    TY_EXIT: spec.exitFile,
    TY_SCRIPT: spec.scriptFile,
    TY_UID: spec.user ? String(spec.user.uid) : '',
    TY_GID: spec.user ? String(spec.user.gid) : '',
    TY_PRIVATE_TMP: spec.user && !underSharedTmp(spec.workDir) ? '1' : '0',
    TY_CGROUP: cgroupProcs,
  };
  return LAUNCH_FIELDS.map((name) => {
    if (fields[name].includes('\0')) throw new SpawnError(`${name} holds a NUL`);
    return `${name}=${fields[name]}\0`;
  }).join('');
}

const WATCH_MS = 250;

/** A number recorded in `file`, once its write is whole; null before. */
async function recordedNumber(file: string): Promise<number | null> {
  const text = await readFile(file, 'utf8').catch(() => null);
  const match = text ? /^(\d+)\n$/.exec(text) : null;
  return match ? Number(match[1]) : null;
}

/** A short file the job may have written, read without following a link it put there. */
function readJobFile(file: string): string | null {
  const fd = openJobFile(file);
  if (fd === null) return null;
  try {
    const buf = Buffer.alloc(64);
    return buf.subarray(0, readSync(fd, buf, 0, buf.length, 0)).toString('utf8');
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/** How the script's status reads, given what the script recorded of its command. */
function fromStatus(status: number, result: string | null): ProcessExit {
  const setup = result ? /^setup-failed (\d+)\n$/.exec(result) : null;
  if (setup && status === SETUP_FAILED) return { kind: 'setup-failed', exitCode: Number(setup[1]) };
  const exit = result ? /^exit (\d+)\n$/.exec(result) : null;
  if (exit && Number(exit[1]) === status) return { kind: 'exited', exitCode: status };
  const stopped = result ? /^signal (\d+)\n$/.exec(result) : null;
  if (stopped && Number(stopped[1]) + 128 !== status) return { kind: 'exited', exitCode: status };
  const signal =
    status > 128
      ? Object.entries(osConstants.signals).find(([, n]) => n === status - 128)?.[0]
      : undefined;
  if (signal) return { kind: 'signalled', signal };
  return { kind: 'exited', exitCode: status };
}

/**
 * The end the spawner recorded (`RunSpec.exitFile`), read with the script's result; with no
 * spawner left to record it, what the script recorded of its own command. Null before either.
 */
async function recordedExit(spec: RunSpec): Promise<ProcessExit | null> {
  const text = await readFile(spec.exitFile, 'utf8').catch(() => null);
  const result = readJobFile(spec.resultFile);
  const status = text ? /^status (\d+)\n$/.exec(text) : null;
  if (status) return fromStatus(Number(status[1]), result);
  const error = text ? /^launch-error (.*)\n$/.exec(text) : null;
  if (error) return { kind: 'launch-error', message: error[1]! };
  const own = result ? /^(exit|setup-failed) (\d+)\n$/.exec(result) : null;
  if (!own) return null;
  return own[1] === 'exit'
    ? { kind: 'exited', exitCode: Number(own[2]) }
    : { kind: 'setup-failed', exitCode: Number(own[2]) };
}

/** The process group the runtime started an attempt in (`RunSpec.pidFile`), if it recorded one. */
export async function recordedPid(pidFile: string): Promise<number | null> {
  const pid = await recordedNumber(pidFile);
  return pid !== null && pid > 1 ? pid : null;
}

/** How a launch ended, from its status and what was recorded; null: its spawner went without a word. */
async function endOf(spec: RunSpec, status: number | null): Promise<ProcessExit> {
  if (status !== null && status < SETUP_FAILED) return { kind: 'exited', exitCode: status };
  const recorded = await recordedExit(spec);
  if (recorded) return recorded;
  if (status !== null) return fromStatus(status, readJobFile(spec.resultFile));
  return { kind: 'lost', message: 'the command ended without recording how' };
}

/**
 * Signals the process group `pid` leads; or, while its leader is still setting it up (a launch
 * answers with the pid before that), the leader itself.
 */
function signalAttempt(pid: number, signal: NodeJS.Signals): void {
  if (!signalGroup(pid, signal)) signalProcess(pid, signal);
}

/**
 * Whether process `pid` ignores SIGTERM: the first process of an isolated attempt that a spawner
 * of an earlier release started, which left its script to hear the process group's.
 */
function ignoresTerm(pid: number): boolean {
  try {
    const ignored = /^SigIgn:\s+([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return ignored !== null && (parseInt(ignored[1]!.slice(-8), 16) & (1 << 14)) !== 0;
  } catch {
    return false;
  }
}

/**
 * Stops an attempt: SIGTERM, then SIGKILL to its whole process group after the grace. An attempt
 * of a user of its own (`isolated`) hears SIGTERM through its first process alone, which passes
 * it on (see `attemptScript`); any other, through its process group.
 */
function killer(pid: number, exited: Promise<ProcessExit>, isolated: boolean) {
  return async (graceMs = 10_000) => {
    if (isolated && !ignoresTerm(pid)) signalProcess(pid, 'SIGTERM');
    else signalAttempt(pid, 'SIGTERM');
    const timer = setTimeout(() => signalAttempt(pid, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
}

/** An attempt that could not start: it has ended, with a launch error. */
export function notStarted(message: string): RunningAttempt {
  return {
    pid: undefined,
    exited: Promise.resolve({ kind: 'launch-error', message }),
    kill: async () => undefined,
  };
}

/** A failed end that the kernel's killing a process for memory explains: out of memory. */
function outOfMemory(end: ProcessExit): boolean {
  return (end.kind === 'exited' && end.exitCode !== 0) || end.kind === 'signalled';
}

/**
 * Runs attempts as local processes, each in its own session and sandbox directory, started by
 * a small spawner. Output goes to the attempt's log file, which the worker reads as it
 * grows; the exit code is recorded beside it. A worker that restarts re-attaches to what still
 * runs. The script, a small file on the sandbox's local disk, is written synchronously: that
 * costs the event loop less than a round trip through the thread pool. Where the host lets the
 * worker make memory cgroups, each attempt runs in one of its own: its `memoryBytes` is a hard
 * limit, and a failed end after the kernel killed one of its processes for memory is `oom`.
 */
export class ProcessRuntime implements Runtime {
  readonly kind = 'process';
  readonly #spawner: Spawner;

  /**
   * `path` replaces the safe PATH for the spawner: for tests of a host without perl. `cgroups`:
   * where attempts' memory cgroups are made; null for none.
   */
  constructor(
    host: NodeJS.ProcessEnv = process.env,
    path = SAFE_PATH,
    private readonly cgroups: MemoryCgroups | null = MemoryCgroups.here(),
  ) {
    this.#spawner = new Spawner(hostEnv(host, path));
  }

  /** Whether attempts' memory limits are held (the host lets the worker make memory cgroups). */
  get limitsMemory(): boolean {
    return this.cgroups !== null;
  }

  /** How the attempt ended, `oom` where the kernel killed one of its processes for memory. */
  async #ended(spec: RunSpec, end: ProcessExit): Promise<ProcessExit> {
    const killed = await this.cgroups?.finish(spec.attemptId, spec.pidFile);
    return killed && outOfMemory(end) ? { kind: 'oom' } : end;
  }

  channel(spec: RunSpec, request: ChannelRequest): Promise<Channel> {
    const user = spec.user && { uid: spec.user.uid, gid: spec.user.gid };
    return openLocalChannel({ dir: spec.workDir, ...user, env: attemptEnv(spec) }, request);
  }

  async start(
    spec: RunSpec,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt> {
    let launched: Launched;
    let pid: number;
    try {
      if (spec.user && !(isJobId(spec.user.uid) && isJobId(spec.user.gid)))
        throw new SpawnError(NOT_JOB_IDS);
      writeFileSync(spec.scriptFile, attemptScript(spec), { mode: 0o600 });
      if (spec.user) chownSync(spec.scriptFile, spec.user.uid, spec.user.gid);
      const procs = this.cgroups?.prepare(spec.attemptId, spec.pidFile, spec.memoryBytes);
      writeFileSync(spec.launchFile, launchScript(spec, procs), { mode: 0o600 });
      launched = this.#spawner.launch(spec.launchFile);
      pid = await launched.pid;
    } catch (err) {
      await this.cgroups?.finish(spec.attemptId, spec.pidFile);
      return notStarted((err as Error).message);
    }
    const tail = new FileTail(spec.logFile, (chunk) => onOutput('stdout', chunk));
    const exited = launched.ended.then(async (status): Promise<ProcessExit> => {
      signalGroup(pid, 'SIGKILL');
      await tail.close();
      return this.#ended(spec, await endOf(spec, status));
    });
    return { pid, exited, kill: killer(pid, exited, spec.user !== undefined) };
  }

  async endUser(uid: number): Promise<void> {
    const status = await this.#spawner.endUser(uid);
    if (status !== 0) throw new SpawnError(`could not end the processes of uid ${uid} (${status})`);
  }

  /** Ends the spawner; the attempts it started run on. */
  close(): void {
    this.#spawner.close();
  }

  async attach(
    spec: RunSpec,
    pid: number,
    offset: number,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt | null> {
    if (pid <= 1) return null;
    if (!signalGroup(pid, 0) && !(await recordedExit(spec))) return null;
    const tail = new FileTail(spec.logFile, (chunk) => onOutput('stdout', chunk), { offset });
    const exited = new Promise<ProcessExit>((resolve) => {
      const watch = async () => {
        const alive = signalGroup(pid, 0);
        const exit = await recordedExit(spec);
        if (alive && !exit) return;
        clearInterval(timer);
        signalGroup(pid, 'SIGKILL');
        await tail.close();
        resolve(
          await this.#ended(
            spec,
            exit ?? {
              kind: 'lost',
              message: 'the command ended while its worker was away, leaving no exit code',
            },
          ),
        );
      };
      const timer = setInterval(() => void watch(), WATCH_MS);
      void watch();
    });
    return { pid, exited, kill: killer(pid, exited, spec.user !== undefined) };
  }
}
