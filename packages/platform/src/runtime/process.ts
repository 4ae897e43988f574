import { constants } from 'node:os';
import { closeSync, openSync, readSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { ProcessExit } from '@trainyard/domain';
import { Spawner, type Launched } from './spawner.ts';
import type { LogStreamName, RunningAttempt, RunSpec, Runtime } from './types.ts';

const PASSED_THROUGH = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR'];

/** The few host variables an attempt sees. */
function hostEnv(host: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of PASSED_THROUGH) {
    const value = host[name];
    if (value !== undefined) env[name] = value;
  }
  return env;
}

/** The environment an attempt sees: a few host variables, the job's env, and Trainyard's. */
export function attemptEnv(
  spec: Pick<RunSpec, 'jobId' | 'attempt' | 'env' | 'workDir' | 'outputDir' | 'gpus'>,
  host: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  return {
    ...hostEnv(host),
    HOME: spec.workDir,
    ...spec.env,
    CUDA_VISIBLE_DEVICES: spec.gpus.join(','),
    TRAINYARD_JOB_ID: spec.jobId,
    TRAINYARD_ATTEMPT: String(spec.attempt),
    TRAINYARD_OUTPUT_DIR: spec.outputDir,
  };
}

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

/** How an attempt's script ends when it could not run its command (as a shell does, 126). */
const SCRIPT_FAILED = 126;

/** `value` as one shell word, quoted so that the shell reads it back unchanged. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`;
}

/**
 * The script that runs one attempt (`RunSpec.scriptFile`), started in a new session. It sends
 * its output to the log file, records its process group id, enters the work directory, sets the
 * attempt's environment, runs the command in a subshell (a fork, no new program) and records
 * its exit code. It outlives its worker: nothing ties it to the worker's pipes. Each record is
 * one short write, read back only once it ends in a newline. It ends with its command's exit
 * code; its own failures end it with `SCRIPT_FAILED` after recording why, so that any lower
 * status is the command's exit code, with no need to read the record.
 */
export function attemptScript(spec: RunSpec, host: NodeJS.ProcessEnv = process.env): string {
  const env = Object.entries(attemptEnv(spec, host)).map(
    ([name, value]) => `export ${shellQuote(`${name}=${value}`)}`,
  );
  const exitFile = shellQuote(spec.exitFile);
  const failed = `exit ${SCRIPT_FAILED}`;
  return [
    `command exec >>${shellQuote(spec.logFile)} 2>&1 || { echo "launch-error cannot open the log file" > ${exitFile}; ${failed}; }`,
    `echo $$ > ${shellQuote(spec.pidFile)}`,
    `cd ${shellQuote(spec.workDir)} || { echo "launch-error cannot enter the work directory" > ${exitFile}; ${failed}; }`,
    ...env,
    `__ty_cmd=${shellQuote(spec.command)}`,
    '(eval "$__ty_cmd")',
    '__ty_code=$?',
    `echo "$__ty_code" > ${exitFile}`,
    'exit "$__ty_code"',
    '',
  ].join('\n');
}

const TAIL_MS = 50;
const WATCH_MS = 250;
/** Reads one pass of a tail makes at most, so that a flood of output cannot hold the loop. */
const MAX_READS_PER_PASS = 64;

/**
 * Reads what is appended to a file, from `offset` on, and hands it over in order. The file is
 * opened once it exists: the process it tails creates it. Reads are synchronous: the file is on
 * the sandbox's local disk, and a read there costs the event loop less than a round trip
 * through the thread pool.
 */
class FileTail {
  #offset: number;
  #fd: number | null = null;
  #timer: NodeJS.Timeout;
  readonly #buffer = Buffer.alloc(64 * 1024);
  constructor(
    private readonly path: string,
    offset: number,
    private readonly onChunk: (chunk: Buffer) => void,
  ) {
    this.#offset = offset;
    this.#timer = setInterval(() => this.#read(MAX_READS_PER_PASS), TAIL_MS);
  }

  /**
   * Reads on from where it was, up to `maxReads` buffers or the end of the file. True when it
   * stopped at `maxReads` with more perhaps left to read.
   */
  #read(maxReads: number): boolean {
    if (this.#fd === null) {
      try {
        this.#fd = openSync(this.path, 'r');
      } catch {
        return false;
      }
    }
    for (let reads = 0; reads < maxReads; reads++) {
      let bytesRead: number;
      try {
        bytesRead = readSync(this.#fd, this.#buffer, 0, this.#buffer.length, this.#offset);
      } catch {
        return false;
      }
      if (bytesRead === 0) return false;
      this.#offset += bytesRead;
      this.onChunk(Buffer.from(this.#buffer.subarray(0, bytesRead)));
    }
    return true;
  }

  #closed: Promise<void> | null = null;

  /**
   * Reads what is left, pass by pass, stops and closes the file; once, however often it is
   * called.
   */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      clearInterval(this.#timer);
      while (this.#read(MAX_READS_PER_PASS)) await new Promise((r) => setImmediate(r));
      if (this.#fd !== null) closeSync(this.#fd);
    })();
    return this.#closed;
  }
}

/** A number the script recorded in `file`, once its write is whole; null before. */
async function recordedNumber(file: string): Promise<number | null> {
  const text = await readFile(file, 'utf8').catch(() => null);
  const match = text ? /^(\d+)\n$/.exec(text) : null;
  return match ? Number(match[1]) : null;
}

/** The exit the script recorded: its command's exit code, or why the command could not run. */
async function recordedExit(exitFile: string): Promise<ProcessExit | null> {
  const text = await readFile(exitFile, 'utf8').catch(() => null);
  const code = text ? /^(\d+)\n$/.exec(text) : null;
  if (code) return { kind: 'exited', exitCode: Number(code[1]) };
  const error = text ? /^launch-error (.*)\n$/.exec(text) : null;
  return error ? { kind: 'launch-error', message: error[1]! } : null;
}

/** The process group an attempt's command recorded as it started (`RunSpec.pidFile`), if any. */
export function recordedPid(pidFile: string): Promise<number | null> {
  return recordedNumber(pidFile);
}

/** How a script that recorded no exit ended, from the status its waiter saw. */
function unrecordedExit(status: number | null): ProcessExit {
  const signal =
    status !== null && status > 128
      ? Object.entries(constants.signals).find(([, n]) => n === status - 128)?.[0]
      : undefined;
  if (signal) return { kind: 'signalled', signal };
  if (status === null) {
    return { kind: 'lost', message: 'the command ended without recording how' };
  }
  return {
    kind: 'launch-error',
    message: `the attempt's shell ended with status ${status} before its command ran`,
  };
}

/**
 * Signals the process group `pid` leads; or, while its leader is still setting it up (a launch
 * answers with the pid before that), the leader itself.
 */
function signalAttempt(pid: number, signal: NodeJS.Signals): void {
  if (!signalGroup(pid, signal)) signalProcess(pid, signal);
}

function killer(pid: number, exited: Promise<ProcessExit>) {
  return async (graceMs = 10_000) => {
    signalAttempt(pid, 'SIGTERM');
    const timer = setTimeout(() => signalAttempt(pid, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
}

/** How often a started attempt is checked for, in case its waiter went away without a word. */
const GONE_CHECK_MS = 1_000;

/**
 * Settles with null once neither the process group `pid` leads nor its leader has been seen on
 * two checks in a row; never, once `ended` has settled first.
 */
function whenGone(pid: number, ended: Promise<unknown>): Promise<null> {
  return new Promise((resolve) => {
    let misses = 0;
    const timer = setInterval(() => {
      misses = signalGroup(pid, 0) || signalProcess(pid, 0) ? 0 : misses + 1;
      if (misses < 2) return;
      clearInterval(timer);
      resolve(null);
    }, GONE_CHECK_MS);
    timer.unref();
    void ended.finally(() => clearInterval(timer));
  });
}

function notStarted(message: string): RunningAttempt {
  return {
    pid: undefined,
    exited: Promise.resolve({ kind: 'launch-error', message }),
    kill: async () => undefined,
  };
}

/**
 * Runs attempts as local processes, each in its own session and sandbox directory, started by
 * a small spawner shell. Output goes to the attempt's log file, which the worker reads as it
 * grows; the exit code is recorded beside it. A worker that restarts re-attaches to what still
 * runs. The script, a small file on the sandbox's local disk, is written synchronously: that
 * costs the event loop less than a round trip through the thread pool.
 */
export class ProcessRuntime implements Runtime {
  readonly kind = 'process';
  readonly #spawner: Spawner;

  constructor(host: NodeJS.ProcessEnv = process.env) {
    this.#spawner = new Spawner(hostEnv(host));
  }

  async start(
    spec: RunSpec,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt> {
    let launched: Launched;
    let pid: number;
    try {
      writeFileSync(spec.scriptFile, attemptScript(spec), { mode: 0o600 });
      launched = this.#spawner.launch(spec.scriptFile);
      pid = await launched.pid;
    } catch (err) {
      return notStarted((err as Error).message);
    }
    const tail = new FileTail(spec.logFile, 0, (chunk) => onOutput('stdout', chunk));
    const ended = Promise.race([launched.ended, whenGone(pid, launched.ended)]);
    const exited = ended.then(async (status): Promise<ProcessExit> => {
      signalGroup(pid, 'SIGKILL');
      await tail.close();
      if (status !== null && status < SCRIPT_FAILED) return { kind: 'exited', exitCode: status };
      return (await recordedExit(spec.exitFile)) ?? unrecordedExit(status);
    });
    return { pid, exited, kill: killer(pid, exited) };
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
    if (!signalGroup(pid, 0) && !(await recordedExit(spec.exitFile))) return null;
    const tail = new FileTail(spec.logFile, offset, (chunk) => onOutput('stdout', chunk));
    const exited = new Promise<ProcessExit>((resolve) => {
      const watch = async () => {
        const alive = signalGroup(pid, 0);
        const exit = await recordedExit(spec.exitFile);
        if (alive && !exit) return;
        clearInterval(timer);
        signalGroup(pid, 'SIGKILL');
        await tail.close();
        resolve(
          exit ?? {
            kind: 'lost',
            message: 'the command ended while its worker was away, leaving no exit code',
          },
        );
      };
      const timer = setInterval(() => void watch(), WATCH_MS);
      void watch();
    });
    return { pid, exited, kill: killer(pid, exited) };
  }
}
