import type { GpuInventory, Runtime } from '@trainyard/platform';

export interface WorkerOptions {
  /** The worker's id: letters, digits, `_` and `-`. */
  name: string;
  inventory: GpuInventory;
  runtime: Runtime;
  cpuSlots: number;
  sandboxRoot: string;
  heartbeatMs: number;
  outputSyncMs: number;
  killGraceMs: number;
  version: string;
}
