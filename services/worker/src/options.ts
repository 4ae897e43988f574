import type { BlobSource, BlobStore } from '@trainyard/blobs';
import type { Gpu } from '@trainyard/events';
import type { GpuInventory, Runtime } from '@trainyard/runtime';
import type { ServiceContext } from '@trainyard/service-kit';
import type { JobUsers } from './users.ts';

export interface WorkerOptions {
  /** The worker's id: letters, digits, `_` and `-`. */
  name: string;
  inventory: GpuInventory;
  runtime: Runtime;
  cpuSlots: number;
  /** The memory placement may share out among this worker's attempts; the host's by default. */
  memoryBytes?: number;
  sandboxRoot: string;
  heartbeatMs: number;
  outputSyncMs: number;
  killGraceMs: number;
  /**
   * How long past its job's time limit an attempt runs before the worker stops it itself, where
   * no stop came from the control plane (it is away).
   */
  timeLimitMarginMs: number;
  version: string;
  /** Where other workers reach this one (gang jobs' `MASTER_ADDR`); its host name by default. */
  address?: string;
  /**
   * Gives each attempt a uid of its own (a worker running as root); absent, attempts run as the
   * worker's own user.
   */
  users?: JobUsers;
  /**
   * Writes outputs and archived logs to the object store bucket of its own that the control
   * plane made for it (a worker with a login of its own); absent, to the shared store (a worker
   * on the control login, or an S3 store).
   */
  ownBucket?: boolean;
}

/** What an attempt runs with: the service's connections, and where the worker reads and writes. */
export interface WorkerContext extends ServiceContext {
  /**
   * Where this worker reads the code and artifacts of its attempts (for the attempt of a job it
   * holds, or a session run): through the control plane.
   */
  reads: (jobId?: string) => BlobSource;
  /** Where this worker keeps outputs and archived logs. */
  written: BlobStore;
  /** The worker's GPUs, as it registered them. */
  gpus: readonly Gpu[];
}
