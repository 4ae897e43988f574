import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@trainyard/testkit';
import type { RunSpec } from '../src/index.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const PROCESS_RUNTIME = fileURLToPath(new URL('../src/process.ts', import.meta.url));

/**
 * A worker of its own, in a child process, that starts `spec`'s attempt on a process runtime and
 * then idles: the caller kills it to see what outlives a worker. Resolves once the attempt has
 * started, with its process group.
 */
export async function workerStarting(
  spec: RunSpec,
): Promise<{ worker: ChildProcess; pid: number }> {
  const code = [
    `import { ProcessRuntime } from ${JSON.stringify(PROCESS_RUNTIME)};`,
    'const run = await new ProcessRuntime().start(JSON.parse(process.argv[1]), () => undefined);',
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
