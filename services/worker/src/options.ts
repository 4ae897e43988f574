import type { GpuInventory, Runtime } from '@trainyard/platform';
import type { JobUsers } from './users.ts';

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
  /**
   * Gives each attempt a uid of its own (a worker running as root); absent, attempts run as the
   * worker's own user.
   */
  users?: JobUsers;
}
