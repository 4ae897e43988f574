import { constants as osConstants } from 'node:os';
import { chownSync, closeSync, readdirSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import type { ProcessExit } from '@trainyard/domain';
import { isJobId, NOT_JOB_IDS } from './perl-spawner.ts';
import { attemptScript, launchScript, SETUP_FAILED } from './attempt-script.ts';
import { SpawnError, Spawner, type Launched } from './spawner.ts';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import { openLocalChannel } from './session-channels.ts';
import { recordedStop, recordStop } from './stop-record.ts';
import { attemptEnv, hostEnv, SAFE_PATH } from './env.ts';
import { FileTail, openJobFile } from './file-tail.ts';
import { logLimitNote } from './logship.ts';
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

const WATCH_MS = 250;

/** How often a stopped attempt's process group is looked at while it may still be saving. */
const LINGER_MS = 50;

/** A stop under way: when its grace ends (0 while there is none), recorded in `file`. */
interface Stopping {
  until: number;
  file: string | undefined;
  /** The attempt has ended and its group is gone: its pid may be another's, signalled no more. */
  over?: boolean;
}

/** The last of an attempt: what lingers of its group is killed, and it is signalled no more. */
function finish(pid: number, stopping: Stopping): void {
  signalGroup(pid, 'SIGKILL');
  stopping.over = true;
}

/**
 * Waits, while a stop's grace lasts, for what is left of an attempt's process group to end after
 * its script did: a program that saves its work on SIGTERM keeps its grace.
 */
async function lingering(pid: number, stopping: Stopping): Promise<void> {
  let member: number | null = pid;
  while (Date.now() < stopping.until) {
    member = runningMember(pid, member);
    if (member === null) return;
    await delay(LINGER_MS);
  }
}

/**
 * A process of the group `group` that still runs, `last` if it still does (the cheap look);
 * null when none does. A zombie does not count: one whose parent ended waits for the host's init
 * (or a worker that is PID 1) to reap it, which may be late. Where /proc cannot be listed, the
 * group is taken as running, for the rest of the grace.
 */
function runningMember(group: number, last: number): number | null {
  if (!signalGroup(group, 0)) return null;
  if (runsIn(last, group)) return last;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return last;
  }
  const found = entries.find((entry) => /^\d+$/.test(entry) && runsIn(Number(entry), group));
  return found === undefined ? null : Number(found);
}

/** Whether process `pid` runs (is no zombie) in the process group `group`. */
function runsIn(pid: number, group: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(pgrp) === group && state !== 'Z';
  } catch {
    return false;
  }
}

/** A number recorded in `file`, once its write is whole; null before. */
async function recordedNumber(file: string): Promise<number | null> {
  const text = await readFile(file, 'utf8').catch(() => null);
  const match = text ? /^(\d+)\n$/.exec(text) : null;
  return match ? Number(match[1]) : null;
}

/**
 * A short file the job may have written, read without following a link it put there, and only
 * where the attempt's user, if it has one of its own, owns it.
 */
function readJobFile(file: string, user: RunSpec['user']): string | null {
  const fd = openJobFile(file, user?.uid);
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
  // A stopped script of a user of its own that recorded its end waits for the rest of its
  // namespace, and may be killed at the grace's end: what it recorded is the end.
  const lingered = status === 128 + osConstants.signals.SIGKILL;
  const setup = result ? /^setup-failed (\d+)\n$/.exec(result) : null;
  if (setup && (status === SETUP_FAILED || lingered))
    return { kind: 'setup-failed', exitCode: Number(setup[1]) };
  const exit = result ? /^exit (\d+)\n$/.exec(result) : null;
  if (exit && (Number(exit[1]) === status || lingered))
    return { kind: 'exited', exitCode: Number(exit[1]) };
  const stopped = result ? /^signal (\d+)\n$/.exec(result) : null;
  if (stopped && lingered) status = Number(stopped[1]) + 128;
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
  const result = readJobFile(spec.resultFile, spec.user);
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
  if (status !== null) return fromStatus(status, readJobFile(spec.resultFile, spec.user));
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
function killer(pid: number, exited: Promise<ProcessExit>, isolated: boolean, stopping: Stopping) {
  return async (graceMs = 10_000) => {
    if (stopping.over) return void (await exited);
    const until = Date.now() + graceMs;
    // A second stop may shorten the grace, never lengthen it.
    stopping.until = stopping.until > 0 ? Math.min(stopping.until, until) : until;
    if (isolated && !ignoresTerm(pid)) signalProcess(pid, 'SIGTERM');
    else signalAttempt(pid, 'SIGTERM');
    // After the signal: a worker that restarts must never find a grace for a stop never sent.
    if (stopping.file) {
      try {
        recordStop(stopping.file, stopping.until);
      } catch {
        // The grace still holds in this worker; only one that restarts would not know it.
      }
    }
    const timer = setTimeout(
      () => stopping.over || signalAttempt(pid, 'SIGKILL'),
      stopping.until - Date.now(),
    );
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

/** How much of an attempt's log a worker keeps unless told other (`TRAINYARD_LOG_LIMIT_MB`). */
export const DEFAULT_LOG_LIMIT_BYTES = 1024 ** 3;

/**
 * Runs attempts as local processes, each in its own session and sandbox directory, started by
 * a small spawner. Output goes to the attempt's log file, which the worker reads as it grows,
 * up to `logLimitBytes` (a job can make its log any size, sparse, without writing it); the
 * exit code is recorded beside it. A worker that restarts re-attaches to what still
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
    readonly logLimitBytes = DEFAULT_LOG_LIMIT_BYTES,
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
    const tail = this.#tail(spec, 0, onOutput);
    const stopping: Stopping = { until: 0, file: spec.stopFile };
    const exited = launched.ended.then(async (status): Promise<ProcessExit> => {
      await lingering(pid, stopping);
      finish(pid, stopping);
      await tail.close();
      return this.#ended(spec, await endOf(spec, status));
    });
    return { pid, exited, kill: killer(pid, exited, spec.user !== undefined, stopping) };
  }

  /** The attempt's log from `offset` on, to the limit, which it says once it reaches it. */
  #tail(spec: RunSpec, offset: number, onOutput: (s: LogStreamName, c: Buffer) => void) {
    const limit = this.logLimitBytes;
    // An offset past the limit (a worker that restarted) counts the note, said already.
    return new FileTail(spec.logFile, (chunk) => onOutput('stdout', chunk), {
      offset: Math.min(offset, limit),
      maxBytes: Math.max(0, limit - offset),
      ...(offset < limit && {
        onLimit: () => onOutput('stdout', Buffer.from(logLimitNote(limit))),
      }),
    });
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
    const tail = this.#tail(spec, offset, onOutput);
    const stopping: Stopping = { until: recordedStop(spec.stopFile), file: spec.stopFile };
    let ending = false;
    const exited = new Promise<ProcessExit>((resolve) => {
      const watch = async () => {
        const alive = signalGroup(pid, 0);
        const exit = await recordedExit(spec);
        if (ending) return;
        if (alive && !exit) {
          // The grace of a stop that the worker before this one began, out with that worker gone.
          if (stopping.until > 0 && Date.now() >= stopping.until) signalGroup(pid, 'SIGKILL');
          return;
        }
        ending = true;
        clearInterval(timer);
        await lingering(pid, stopping);
        finish(pid, stopping);
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
    return { pid, exited, kill: killer(pid, exited, spec.user !== undefined, stopping) };
  }
}
