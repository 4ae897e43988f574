import { spawn } from 'node:child_process';
import type { ProcessExit } from '@trainyard/domain';
import type { LogStreamName, RunningAttempt, RunSpec, Runtime } from './types.ts';

const PASSED_THROUGH = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR'];

/** The environment an attempt sees: a few host variables, the job's env, and Trainyard's. */
export function attemptEnv(
  spec: RunSpec,
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

function signalGroup(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** Runs attempts as local processes, each in its own process group and sandbox directory. */
export class ProcessRuntime implements Runtime {
  readonly kind = 'process';

  start(spec: RunSpec, onOutput: (stream: LogStreamName, chunk: Buffer) => void): RunningAttempt {
    const child = spawn('/bin/sh', ['-c', spec.command], {
      cwd: spec.workDir,
      env: attemptEnv(spec),
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.on('data', (chunk: Buffer) => onOutput('stdout', chunk));
    child.stderr.on('data', (chunk: Buffer) => onOutput('stderr', chunk));
    const exited = new Promise<ProcessExit>((resolve) => {
      child.once('error', (err) => resolve({ kind: 'launch-error', message: err.message }));
      child.once('close', (code, signal) => {
        if (child.pid !== undefined) signalGroup(child.pid, 'SIGKILL');
        resolve(signal ? { kind: 'signalled', signal } : { kind: 'exited', exitCode: code ?? -1 });
      });
    });
    return {
      pid: child.pid,
      exited,
      kill: async (graceMs = 10_000) => {
        const pid = child.pid;
        if (pid === undefined) return;
        signalGroup(pid, 'SIGTERM');
        const timer = setTimeout(() => signalGroup(pid, 'SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      },
    };
  }
}
