import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { open, readFile, type FileHandle } from 'node:fs/promises';
import type { ProcessExit } from '@trainyard/domain';
import type { LogStreamName, RunningAttempt, RunSpec, Runtime } from './types.ts';

const PASSED_THROUGH = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR'];

/** The environment an attempt sees: a few host variables, the job's env, and Trainyard's. */
export function attemptEnv(
  spec: Pick<RunSpec, 'jobId' | 'attempt' | 'env' | 'workDir' | 'outputDir' | 'gpus'>,
  host: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of PASSED_THROUGH) {
    const value = host[name];
    if (value !== undefined) env[name] = value;
  }
  return {
    ...env,
    HOME: spec.workDir,
    ...spec.env,
    CUDA_VISIBLE_DEVICES: spec.gpus.join(','),
    TRAINYARD_JOB_ID: spec.jobId,
    TRAINYARD_ATTEMPT: String(spec.attempt),
    TRAINYARD_OUTPUT_DIR: spec.outputDir,
  };
}

function signalGroup(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * Records its process group id, runs the command in a subshell (a fork, no new program), its
 * output going to the log file, then records its exit code beside it. It outlives its worker:
 * nothing ties it to the worker's pipes. Each record is one short write, read back only once it
 * ends in a newline.
 */
const WRAPPER =
  '__ty_cmd=$1; __ty_exit=$2; echo $$ > "$3"; set --; (eval "$__ty_cmd"); __ty_code=$?; echo "$__ty_code" > "$__ty_exit"; exit "$__ty_code"';
const TAIL_MS = 50;
const WATCH_MS = 250;

/** Reads what is appended to a file, from `offset` on, and hands it over in order. */
class FileTail {
  #offset: number;
  #file: Promise<FileHandle | null>;
  #reading: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout;
  readonly #buffer = Buffer.alloc(64 * 1024);
  constructor(
    path: string,
    offset: number,
    private readonly onChunk: (chunk: Buffer) => void,
  ) {
    this.#offset = offset;
    this.#file = open(path, 'r').catch(() => null);
    this.#timer = setInterval(() => void this.read(), TAIL_MS);
  }

  /** Reads up to the end of the file as it is now. */
  read(): Promise<void> {
    this.#reading = this.#reading.then(() => this.#readToEnd()).catch(() => undefined);
    return this.#reading;
  }

  async #readToEnd(): Promise<void> {
    const file = await this.#file;
    if (!file) return;
    for (;;) {
      const { bytesRead } = await file.read(this.#buffer, 0, this.#buffer.length, this.#offset);
      if (bytesRead === 0) return;
      this.#offset += bytesRead;
      this.onChunk(Buffer.from(this.#buffer.subarray(0, bytesRead)));
    }
  }

  #closed: Promise<void> | null = null;

  /** Reads what is left, stops and closes the file; once, however often it is called. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      clearInterval(this.#timer);
      await this.read();
      await (await this.#file)?.close();
    })();
    return this.#closed;
  }
}

/** A number the wrapper recorded in `file`, once its write is whole; null before. */
async function recordedNumber(file: string): Promise<number | null> {
  const text = await readFile(file, 'utf8').catch(() => null);
  const match = text ? /^(\d+)\n$/.exec(text) : null;
  return match ? Number(match[1]) : null;
}

async function recordedExit(exitFile: string): Promise<ProcessExit | null> {
  const code = await recordedNumber(exitFile);
  return code === null ? null : { kind: 'exited', exitCode: code };
}

/** The process group an attempt's command recorded as it started (`RunSpec.pidFile`), if any. */
export function recordedPid(pidFile: string): Promise<number | null> {
  return recordedNumber(pidFile);
}

function killer(pid: number, exited: Promise<ProcessExit>) {
  return async (graceMs = 10_000) => {
    signalGroup(pid, 'SIGTERM');
    const timer = setTimeout(() => signalGroup(pid, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
}

/**
 * Runs attempts as local processes, each in its own process group and sandbox directory. Output
 * goes to the attempt's log file, which the worker reads as it grows; the exit code is recorded
 * beside it. A worker that restarts re-attaches to what still runs.
 */
export class ProcessRuntime implements Runtime {
  readonly kind = 'process';

  start(spec: RunSpec, onOutput: (stream: LogStreamName, chunk: Buffer) => void): RunningAttempt {
    const fd = openSync(spec.logFile, 'a');
    const child = spawn(
      '/bin/sh',
      ['-c', WRAPPER, 'trainyard-attempt', spec.command, spec.exitFile, spec.pidFile],
      {
        cwd: spec.workDir,
        env: attemptEnv(spec),
        detached: true,
        stdio: ['ignore', fd, fd],
      },
    );
    closeSync(fd);
    const tail = new FileTail(spec.logFile, 0, (chunk) => onOutput('stdout', chunk));
    const exited = new Promise<ProcessExit>((resolve) => {
      child.once('error', (err) => {
        void tail.close().then(() => resolve({ kind: 'launch-error', message: err.message }));
      });
      child.once('exit', (code, signal) => {
        if (child.pid !== undefined) signalGroup(child.pid, 'SIGKILL');
        void tail
          .close()
          .then(() =>
            resolve(
              signal ? { kind: 'signalled', signal } : { kind: 'exited', exitCode: code ?? -1 },
            ),
          );
      });
    });
    const pid = child.pid;
    return {
      pid,
      exited,
      kill: pid === undefined ? async () => undefined : killer(pid, exited),
    };
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
