/**
 * Runs several simulated workers in one process, each on a NATS connection of its own, for
 * benchmarks that need many workers on a 2-core machine:
 * `worker-host.ts PREFIX COUNT SHAPE SANDBOXES [--simulate-runtime]`, where SANDBOXES is the
 * directory their sandboxes go under. Each is a full worker (its own registration, heartbeats
 * and per-GPU consumers).
 */
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { workerOptions } from '@trainyard/stack';
import {
  BaseConfigSchema,
  openContext,
  parseEnv,
  stopOnSignals,
  workerInbox,
  type ServiceContext,
} from '@trainyard/service-kit';
import { startWorker, type RunningWorker } from '@trainyard/worker';

const [prefix = 'host', count = '1', shape = '8x80GiB', sandboxes = tmpdir(), ...flags] =
  process.argv.slice(2);
const workers: RunningWorker[] = [];
const contexts: ServiceContext[] = [];
for (let i = 0; i < Number(count); i++) {
  const name = `${prefix}${i}`;
  // A connection per worker: the control plane answers a worker's reports only in its own inbox.
  const ctx = await openContext('worker-host', parseEnv(BaseConfigSchema), {
    manage: false,
    inboxPrefix: workerInbox(name),
  });
  contexts.push(ctx);
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
      await Promise.all(contexts.map((c) => c.bus.close()));
    },
  },
  contexts[0]!.log,
);
