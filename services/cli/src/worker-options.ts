import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import {
  NoGpuInventory,
  NvidiaSmiInventory,
  ProcessRuntime,
  SimulatedInventory,
  SimulatedRuntime,
  type GpuInventory,
} from '@trainyard/platform';
import type { WorkerOptions } from '@trainyard/worker';
import { CliError } from './client.ts';
import { homeDirOf } from './config.ts';

const VERSION = '0.1.0';

export interface WorkerFlags {
  name?: string;
  simulateGpus?: string;
  cpuSlots?: string;
  sandbox?: string;
  heartbeatMs?: string;
  simulateRuntime?: boolean;
}

async function inventoryFor(flags: WorkerFlags): Promise<GpuInventory> {
  if (flags.simulateGpus) return SimulatedInventory.parse(flags.simulateGpus);
  const smi = new NvidiaSmiInventory();
  return (await smi.available()) ? smi : new NoGpuInventory();
}

/** Worker options from command-line flags, with defaults for this host. */
export async function workerOptions(flags: WorkerFlags): Promise<WorkerOptions> {
  const name = flags.name ?? 'local';
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name))
    throw new CliError('--name may hold letters, digits, _ and - only');
  return {
    name,
    inventory: await inventoryFor(flags),
    runtime: flags.simulateRuntime ? new SimulatedRuntime() : new ProcessRuntime(),
    cpuSlots: flags.cpuSlots !== undefined ? Number(flags.cpuSlots) : availableParallelism(),
    sandboxRoot: flags.sandbox ?? join(homeDirOf(), 'sandboxes', name),
    heartbeatMs: Number(flags.heartbeatMs ?? 2_000),
    outputSyncMs: 2_000,
    killGraceMs: 10_000,
    version: VERSION,
  };
}
