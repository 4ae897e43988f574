/**
 * Runs several simulated workers in one process, sharing one NATS connection, for benchmarks
 * that need many workers on a 2-core machine:
 * `worker-host.ts PREFIX COUNT SHAPE SANDBOXES [--simulate-runtime]`, where SANDBOXES is the
 * directory their sandboxes go under. Each is a full worker (its own registration, heartbeats
 * and per-GPU consumers).
 */
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { workerOptions } from '@trainyard/cli';
import { BaseConfigSchema, openContext, parseEnv, stopOnSignals } from '@trainyard/platform';
import { startWorker, type RunningWorker } from '@trainyard/worker';

const [prefix = 'host', count = '1', shape = '8x80GiB', sandboxes = tmpdir(), ...flags] =
  process.argv.slice(2);
// Its login is the stack's own (every right), so its replies arrive under the plain inbox: the
// control plane answers a worker's report only in that worker's inbox, or in such a login's.
const ctx = await openContext('worker-host', parseEnv(BaseConfigSchema), { manage: false });
const workers: RunningWorker[] = [];
for (let i = 0; i < Number(count); i++) {
  const name = `${prefix}${i}`;
  const opts = await workerOptions({
    name,
    simulateGpus: shape,
    cpuSlots: '0',
    sandbox: join(sandboxes, 'trainyard-bench-sandboxes', name),
    simulateRuntime: flags.includes('--simulate-runtime'),
  });
  workers.push(await startWorker(ctx, opts));
}
stopOnSignals(
  {
    stop: async () => {
      await Promise.all(workers.map((w) => w.stop()));
      await ctx.bus.close();
    },
  },
  ctx.log,
);
