/**
 * What every container Trainyard makes shares: the labels that find it again, where its work
 * is, and the limits that confine it.
 */
import type Docker from 'dockerode';

/** The working directory of a job's image: its code. */
export const CONTAINER_WORK_DIR = '/workspace';

export const Labels = {
  job: 'trainyard.job',
  attempt: 'trainyard.attempt',
  session: 'trainyard.session',
  run: 'trainyard.run',
  worker: 'trainyard.worker',
} as const;

/** The account a container runs as when a worker running as root gives it none of its own. */
const NOBODY = { uid: 65534, gid: 65534 };

/** Whom a container runs as: the account given, else the worker's own, never root. */
export function containerAccount(user?: { uid: number; gid: number }): {
  uid: number;
  gid: number;
} {
  if (user) return user;
  const uid = process.getuid?.() ?? 0;
  return uid === 0 ? NOBODY : { uid, gid: process.getgid?.() ?? uid };
}

/** Processes one container may hold: a fork bomb stops there. */
const PIDS_LIMIT = 4096;

/** How a worker gives containers their network and GPUs. */
export interface ConfineOptions {
  /** Network of the containers: `none` (the default) keeps them off the control plane. */
  network?: string;
  /**
   * `nvidia`: GPUs are given to containers by UUID through the NVIDIA runtime. `none`: no
   * device is given (a host whose GPUs are simulated).
   */
  gpuDevices?: 'nvidia' | 'none';
}

/** What a container may use and hold: its user, GPUs, memory and CPUs. */
export interface ContainerLimits {
  /** The account it runs as; absent: `containerAccount`'s. */
  user?: { uid: number; gid: number };
  gpus: number[];
  gpuUuids?: string[];
  memoryBytes?: number;
  cpus?: number;
}

/**
 * What every container Trainyard makes shares: a uid that is not root and no capabilities, no
 * new privileges, a cap on processes, the network named (none by default), only the assigned
 * GPUs (by UUID) and the memory and CPU limits asked for. `env` gains what hides the GPUs from a
 * container given none.
 */
export function confinedHost(
  limits: ContainerLimits,
  opts: ConfineOptions,
  env: Record<string, string>,
): Docker.HostConfig {
  const uuids = limits.gpuUuids ?? [];
  const nvidia = (opts.gpuDevices ?? 'nvidia') === 'nvidia';
  if (nvidia && limits.gpus.length > 0 && uuids.length !== limits.gpus.length)
    throw new Error(`the UUIDs of GPUs ${limits.gpus.join(',')} are not known: none is given`);
  const gpus = nvidia && uuids.length > 0;
  // Without a device request a container sees no GPU, whatever its image or the job says.
  if (!gpus) env.NVIDIA_VISIBLE_DEVICES = 'void';
  return {
    NetworkMode: opts.network ?? 'none',
    Init: true,
    CapDrop: ['ALL'],
    SecurityOpt: ['no-new-privileges'],
    PidsLimit: PIDS_LIMIT,
    ...(limits.memoryBytes && { Memory: limits.memoryBytes, MemorySwap: limits.memoryBytes }),
    ...(limits.cpus && { NanoCpus: limits.cpus * 1e9 }),
    ...(gpus && {
      DeviceRequests: [{ Driver: 'nvidia', DeviceIDs: uuids, Capabilities: [['gpu']] }],
    }),
  };
}
