import { join } from 'node:path';
import type { RunSpec } from '../src/index.ts';

let runs = 0;

/** A run of `command` in `dir`, its files numbered so that no two runs share one. */
export function runSpecIn(dir: string, command: string, over: Partial<RunSpec> = {}): RunSpec {
  runs++;
  return {
    logFile: join(dir, `run-${runs}.log`),
    exitFile: join(dir, `run-${runs}.exit`),
    pidFile: join(dir, `run-${runs}.pid`),
    scriptFile: join(dir, `run-${runs}.sh`),
    launchFile: join(dir, `run-${runs}.launch`),
    resultFile: join(dir, `run-${runs}.result`),
    jobId: 'job_1',
    attemptId: 'att_1',
    attempt: 1,
    command,
    env: {},
    workDir: dir,
    outputDir: join(dir, 'out'),
    gpus: [],
    ...over,
  };
}
