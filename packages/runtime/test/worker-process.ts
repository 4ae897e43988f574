import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@trainyard/testkit';
import type { RunSpec } from '../src/index.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const PROCESS_RUNTIME = fileURLToPath(new URL('../src/process.ts', import.meta.url));

/**
 * A worker of its own, in a child process, that starts `spec`'s attempt on a process runtime and
 * then idles: the caller kills it to see what outlives a worker. With `stopGraceMs`, it first
 * waits for the attempt's first output (within 15 s) and begins to stop it with that grace.
 * Resolves once the attempt has started (and the stop begun), with its process group.
 */
export async function workerStarting(
  spec: RunSpec,
  stopGraceMs?: number,
): Promise<{ worker: ChildProcess; pid: number }> {
  const code = [
    "import { existsSync, statSync } from 'node:fs';",
    `import { ProcessRuntime } from ${JSON.stringify(PROCESS_RUNTIME)};`,
    'const spec = JSON.parse(process.argv[1]);',
    'const run = await new ProcessRuntime().start(spec, () => undefined);',
    ...(stopGraceMs === undefined
      ? []
      : [
          'const deadline = Date.now() + 15_000;',
          'while (!existsSync(spec.logFile) || statSync(spec.logFile).size === 0) {',
          '  if (Date.now() > deadline) process.exit(2);',
          '  await new Promise((resolve) => setTimeout(resolve, 20));',
          '}',
          `void run.kill(${stopGraceMs});`,
        ]),
    'console.log(run.pid);',
    'setInterval(() => undefined, 60_000);',
  ].join('\n');
  const worker = spawn(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', code, JSON.stringify(spec)],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let said = '';
  worker.stdout!.on('data', (chunk: Buffer) => (said += chunk.toString()));
  try {
    const pid = Number(
      await waitFor('the worker to start the attempt', () => /^\d+\n/.exec(said)?.[0]),
    );
    return { worker, pid };
  } catch (err) {
    worker.kill('SIGKILL');
    throw err;
  }
}

/**
 * Starts `spec`'s attempt in a worker of its own that is the first process of a PID namespace,
 * as a worker in a container without an init is, and so reaps nothing it did not start itself;
 * stops it with a grace of `graceMs` once its log says `ready` (within 15 s, or it fails).
 * Resolves with how long the stop took, in milliseconds.
 */
export async function stopInWorkerAsInit(spec: RunSpec, graceMs: number): Promise<number> {
  const code = [
    "import { existsSync, readFileSync } from 'node:fs';",
    `import { ProcessRuntime } from ${JSON.stringify(PROCESS_RUNTIME)};`,
    'const spec = JSON.parse(process.argv[1]);',
    'const runtime = new ProcessRuntime();',
    'const run = await runtime.start(spec, () => undefined);',
    'const ready = () =>',
    "  existsSync(spec.logFile) && readFileSync(spec.logFile, 'utf8').includes('ready');",
    'const deadline = Date.now() + 15_000;',
    'while (!ready()) {',
    '  if (Date.now() > deadline) process.exit(2);',
    '  await new Promise((resolve) => setTimeout(resolve, 20));',
    '}',
    'const stopped = Date.now();',
    `await run.kill(${graceMs});`,
    'console.log(Date.now() - stopped);',
    'process.exit(0);',
  ].join('\n');
  const node = [process.execPath, '--import', 'tsx', '--input-type=module', '-e', code];
  const worker = spawn(
    'unshare',
    ['--fork', '--pid', '--mount-proc', ...node, JSON.stringify(spec)],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let said = '';
  worker.stdout!.on('data', (chunk: Buffer) => (said += chunk.toString()));
  const status = await new Promise<number | null>((resolve) => worker.once('exit', resolve));
  const took = /^(\d+)\n/.exec(said);
  if (status !== 0 || !took) throw new Error(`the worker as init ended ${status}: ${said}`);
  return Number(took[1]);
}
