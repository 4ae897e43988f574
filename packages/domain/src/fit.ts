/** What fits where: whether a job or session fits a worker as it stands, and on which GPUs. */
import type { GpuUsage, WorkerState } from './cluster.ts';
import type { Candidate } from './candidates.ts';
import { GiB, type PlacementPolicy } from './policy.ts';

export interface Assignment {
  /** What is placed: an attempt of a job, or a run of a session. */
  kind: 'job' | 'session';
  /** The job's id, or the session's. */
  id: string;
  workerId: string;
  gpus: number[];
  vramBytes: number;
  cpus: number;
  /** A gang job's other members, ranks 1 and on, each on a worker of its own. */
  members?: Pick<Assignment, 'workerId' | 'gpus' | 'vramBytes' | 'cpus'>[];
}
/**
 * Bytes a job takes on each of its GPUs: its declared VRAM, else what its probe measured, else
 * (its probe, or a job from before probes) the whole GPU.
 */
function vramNeed(job: Candidate, gpu: GpuUsage, policy: PlacementPolicy): number {
  const gb = job.resources.vramGb;
  if (gb !== undefined) return Math.ceil(gb * GiB);
  const estimate = job.estimate;
  if (!estimate) return gpu.vramBytes;
  // A job measured at (nearly) a whole GPU ran on one: it takes one whole.
  const need = estimate.vramBytes + policy.contextBytes;
  return need + policy.headroomBytes > gpu.vramBytes ? gpu.vramBytes : need;
}

/** Whether a job takes its GPUs whole: its probe, or a job whose need is unknown. */
export function takesWholeGpus(job: Candidate): boolean {
  return job.resources.vramGb === undefined && !job.estimate;
}

/** Whether a GPU is of the model the job asks for, if it asks for one. */
function modelFits(job: Candidate, gpu: GpuUsage): boolean {
  const model = job.resources.gpuModel;
  if (model === undefined) return true;
  let byName = modelMatches.get(model);
  if (!byName) {
    // Models come from users' specs: the memo is dropped before it grows without bound.
    if (modelMatches.size >= 1024) modelMatches.clear();
    modelMatches.set(model, (byName = new Map()));
  }
  let fits = byName.get(gpu.name);
  if (fits === undefined) {
    fits = gpu.name.toLowerCase().includes(model.toLowerCase());
    byName.set(gpu.name, fits);
  }
  return fits;
}

/** Whether a GPU name holds a model, by model and name: a fleet has few of either. */
const modelMatches = new Map<string, Map<string, boolean>>();

function gpuFits(job: Candidate, gpu: GpuUsage, policy: PlacementPolicy): boolean {
  if (!modelFits(job, gpu)) return false;
  if (takesWholeGpus(job)) return gpu.attempts === 0;
  const need = vramNeed(job, gpu, policy);
  if (need === gpu.vramBytes && job.estimate) return gpu.attempts === 0;
  return need + policy.headroomBytes <= gpu.vramBytes - gpu.reservedBytes;
}

/**
 * Whether the host's memory left holds what the job needs, where the worker counts it. A job
 * that needs more than the host has takes a host whose memory nothing else counts on.
 */
function memoryFits(job: Candidate, worker: WorkerState): boolean {
  if (worker.memoryBytes === null) return true;
  const need = job.memoryBytes;
  return worker.memoryUsed + need <= worker.memoryBytes || worker.memoryUsed === 0;
}

/**
 * Whether a worker runs attempts the way the job needs: in a container, or not; and holds its
 * memory limit, where it has one.
 */
function runtimeFits(job: Candidate, worker: WorkerState): boolean {
  if (job.resources.memoryGb !== undefined && !worker.limitsMemory) return false;
  return job.container === (worker.runtime === 'docker');
}

/**
 * The dispatch contract a worker must read for it: 2 for a probe, 3 for a session, 4 for a
 * session in a container, 5 for a gang's member, 6 for a service.
 */
function dispatchNeeded(job: Candidate): number {
  if (job.kind === 'session') return SESSION_DISPATCH_VERSION + (job.container ? 1 : 0);
  if (job.nodes > 1) return GANG_DISPATCH_VERSION;
  if (job.service) return SERVICE_DISPATCH_VERSION;
  return job.probe ? 2 : 1;
}

/** The dispatch version that carries sessions' runs. */
export const SESSION_DISPATCH_VERSION = 3;
/** The dispatch version that carries a gang's members. */
const GANG_DISPATCH_VERSION = 5;
/** The dispatch version that carries a service's ports and health check. */
const SERVICE_DISPATCH_VERSION = 6;

export function fitOnWorker(
  job: Candidate,
  worker: WorkerState,
  policy: PlacementPolicy,
): Assignment | null {
  if (!runtimeFits(job, worker)) return null;
  if (!memoryFits(job, worker)) return null;
  if (worker.dispatchVersion < dispatchNeeded(job)) return null;
  const { resources, kind, id } = job;
  if (resources.gpus === 0) {
    const cpus = resources.cpus ?? 1;
    if (worker.cpuSlots - worker.cpusUsed < cpus) return null;
    return { kind, id, workerId: worker.id, gpus: [], vramBytes: 0, cpus };
  }
  let fits = 0;
  for (const gpu of worker.gpus) if (gpuFits(job, gpu, policy)) fits++;
  if (fits < resources.gpus) return null;
  const probe = job.probe;
  // A probe gets the GPUs with the most memory, so that what it measures is not cut short; any
  // other job the tightest that fit, leaving room for larger ones.
  const fitting = worker.gpus
    .filter((g) => gpuFits(job, g, policy))
    .sort((a, b) =>
      probe
        ? b.vramBytes - a.vramBytes || a.index - b.index
        : a.vramBytes - a.reservedBytes - (b.vramBytes - b.reservedBytes) || a.index - b.index,
    );
  const chosen = fitting.slice(0, resources.gpus);
  const vramBytes = Math.max(...chosen.map((g) => vramNeed(job, g, policy)));
  return {
    kind,
    id,
    workerId: worker.id,
    gpus: chosen.map((g) => g.index).sort((a, b) => a - b),
    vramBytes,
    cpus: 0,
  };
}
/** What a worker is, as placement reads it, without what it runs now. */
export type WorkerShape = Pick<
  WorkerState,
  'id' | 'cpuSlots' | 'memoryBytes' | 'limitsMemory' | 'runtime' | 'dispatchVersion'
> & { gpus: { index: number; name: string; vramBytes: number }[] };

/** Whether a worker of this shape, with nothing on it, could hold the candidate. */
export function couldEverHold(
  job: Candidate,
  worker: WorkerShape,
  policy: PlacementPolicy,
): boolean {
  const empty: WorkerState = {
    id: worker.id,
    lifecycle: { status: 'online' },
    address: worker.id,
    gpus: worker.gpus.map((g) => ({ ...g, reservedBytes: 0, attempts: 0, simulated: false })),
    cpuSlots: worker.cpuSlots,
    cpusUsed: 0,
    memoryBytes: worker.memoryBytes,
    memoryUsed: 0,
    limitsMemory: worker.limitsMemory,
    runtime: worker.runtime,
    dispatchVersion: worker.dispatchVersion,
    attempts: new Set(),
    registeredSeq: 0,
    reportedRunning: new Set(),
  };
  return fitOnWorker(job, empty, policy) !== null;
}
