import type { Estimate, Resources } from '@trainyard/events';
import {
  sessionMemoryNeed,
  type ClusterState,
  type GpuUsage,
  type TrackedJob,
  type TrackedSession,
  type WorkerState,
} from './cluster.ts';
import { awaitsPlacement, memoryNeed, probesNext, runsInContainer } from './job/state.ts';
import { sessionAwaitsPlacement } from './session/state.ts';

export const GiB = 1024 ** 3;

export interface PlacementPolicy {
  /** Memory kept free on every GPU beyond what jobs declare. */
  headroomBytes: number;
  /**
   * What a measured job takes on a GPU beyond what its probe measured: the CUDA context and
   * what PyTorch allocates outside its caching allocator, which `max_memory_reserved` leaves out.
   */
  contextBytes: number;
  /**
   * Priority a waiting job or session gains per hour in the queue: what it is placed by is its
   * priority plus its wait times this (whole points), so that newer work of a higher priority
   * cannot pass it forever.
   */
  agingPerHour: number;
}

export const DEFAULT_POLICY: PlacementPolicy = {
  headroomBytes: GiB,
  contextBytes: GiB / 2,
  agingPerHour: 10,
};

const HOUR = 3_600_000;

/** What a candidate is placed by: its priority, plus the whole points it gained waiting since `queuedAt`. */
export function effectivePriority(
  priority: number,
  queuedAt: string,
  now: Date,
  policy: Pick<PlacementPolicy, 'agingPerHour'>,
): number {
  const waitedMs = now.getTime() - Date.parse(queuedAt);
  if (!(waitedMs > 0)) return priority;
  // Whole points: between near-equals, the order of the log decides, not the writers' clocks.
  return priority + Math.floor((waitedMs / HOUR) * policy.agingPerHour);
}

export interface Assignment {
  /** What is placed: an attempt of a job, or a run of a session. */
  kind: 'job' | 'session';
  /** The job's id, or the session's. */
  id: string;
  workerId: string;
  gpus: number[];
  vramBytes: number;
  cpus: number;
}

export interface Plan {
  assignments: Assignment[];
  /** The earliest time a waiting retry becomes placeable, if any. */
  wakeAt: Date | null;
}

/**
 * What placement needs to know of a job or a session that waits for a place. A session is
 * placed like a job that declares its VRAM (or takes its GPUs whole), on the host.
 */
export interface Candidate {
  kind: Assignment['kind'];
  id: string;
  resources: Resources;
  /** Its priority, aged: see `effectivePriority`. */
  priority: number;
  /** Orders candidates of equal priority: the one queued longest first. */
  queuedSeq: number;
  container: boolean;
  estimate: Estimate | null;
  /** Its next attempt is a probe. */
  probe: boolean;
  memoryBytes: number;
  /** The object its resources came from, by which its shape is kept. */
  source: object;
}

function jobCandidate(job: TrackedJob, aged: Aged): Candidate | null {
  const spec = job.state.spec;
  if (!spec) return null;
  return {
    kind: 'job',
    id: job.state.id,
    resources: spec.resources,
    priority: aged(spec.priority, job.queuedAt),
    queuedSeq: job.queuedSeq,
    container: runsInContainer(spec),
    estimate: job.state.estimate,
    probe: probesNext(job.state),
    memoryBytes: memoryNeed(job.state),
    source: spec,
  };
}

function sessionCandidate(session: TrackedSession, aged: Aged): Candidate | null {
  const spec = session.state.spec;
  if (!spec) return null;
  return {
    kind: 'session',
    id: session.state.id,
    resources: spec.resources,
    priority: aged(0, session.queuedAt),
    queuedSeq: session.queuedSeq,
    container: session.state.image !== null,
    estimate: null,
    probe: false,
    memoryBytes: sessionMemoryNeed(session.state),
    source: spec,
  };
}

/** A priority aged by the wait since `queuedAt`. */
type Aged = (priority: number, queuedAt: string) => number;

/** Jobs and sessions that may be placed now (in no order), and when the next retry comes due. */
export function placeable(
  cluster: ClusterState,
  now: Date,
  policy: PlacementPolicy,
): { ready: Candidate[]; wakeAt: Date | null } {
  const aged: Aged = (priority, queuedAt) => effectivePriority(priority, queuedAt, now, policy);
  const ready: Candidate[] = [];
  let wakeAt: number | null = null;
  const add = (c: Candidate | null) => c && ready.push(c);
  for (const job of cluster.jobs.values()) {
    const { status, retryAt } = job.state;
    if (!awaitsPlacement(job.state)) continue;
    if (status !== 'retrying') add(jobCandidate(job, aged));
    else if (retryAt) {
      const at = Date.parse(retryAt);
      if (at <= now.getTime()) add(jobCandidate(job, aged));
      else wakeAt = wakeAt === null ? at : Math.min(wakeAt, at);
    }
  }
  for (const session of cluster.sessions.values()) {
    if (sessionAwaitsPlacement(session.state)) add(sessionCandidate(session, aged));
  }
  return { ready, wakeAt: wakeAt === null ? null : new Date(wakeAt) };
}

/** Placement order: higher (aged) priority first, then the one queued longest. */
export function byPlacementOrder(a: Candidate, b: Candidate): number {
  return b.priority - a.priority || a.queuedSeq - b.queuedSeq;
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
function takesWholeGpus(job: Candidate): boolean {
  return job.resources.vramGb === undefined && !job.estimate;
}

/** Whether a GPU is of the model the job asks for, if it asks for one. */
function modelFits(job: Candidate, gpu: GpuUsage): boolean {
  const model = job.resources.gpuModel;
  return model === undefined || gpu.name.toLowerCase().includes(model.toLowerCase());
}

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
 * session in a container.
 */
function dispatchNeeded(job: Candidate): number {
  if (job.kind === 'session') return SESSION_DISPATCH_VERSION + (job.container ? 1 : 0);
  return job.probe ? 2 : 1;
}

/** The dispatch version that carries sessions' runs. */
export const SESSION_DISPATCH_VERSION = 3;

function fitOnWorker(
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
  if (fitting.length < resources.gpus) return null;
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

/**
 * What a job asks of a worker. Within one round capacity only shrinks, so once a job finds no
 * place, no later job that asks the same finds one either.
 */
export function shapeOf(job: Candidate): string {
  let shape = shapes.get(job.source);
  if (shape === undefined) {
    const { gpus, vramGb, cpus, gpuModel } = job.resources;
    const where = `${job.kind} ${job.container ? 'container' : 'host'}`;
    shape =
      gpus === 0
        ? `${where} cpu ${cpus ?? 1}`
        : `${where} gpu ${gpus} ${vramGb ?? 'whole'} ${gpuModel ?? 'any'}`;
    shapes.set(job.source, shape);
  }
  const estimate = job.estimate;
  const memory = job.memoryBytes;
  const measured = estimate ? `${shape} measured ${estimate.vramBytes}` : shape;
  return memory > 0 ? `${measured} ram ${memory}` : measured;
}

const shapes = new WeakMap<object, string>();

/** The smallest memory among an assignment's GPUs: a probe goes where it is largest. */
function smallestGpu(worker: WorkerState, a: Assignment): number {
  return Math.min(...a.gpus.map((i) => worker.gpus.find((g) => g.index === i)!.vramBytes));
}

/** Where a job goes: the first worker it fits on; a probe, the one with the largest GPUs. */
function place(job: Candidate, workers: WorkerState[], policy: PlacementPolicy) {
  let best: { worker: WorkerState; a: Assignment } | null = null;
  for (const worker of workers) {
    const a = fitOnWorker(job, worker, policy);
    if (!a) continue;
    if (!job.probe || a.gpus.length === 0) return { worker, a };
    if (!best || smallestGpu(worker, a) > smallestGpu(best.worker, best.a)) best = { worker, a };
  }
  return best;
}

function apply(worker: WorkerState, a: Assignment, job: Candidate): void {
  worker.memoryUsed += job.memoryBytes;
  for (const index of a.gpus) {
    const gpu = worker.gpus.find((g) => g.index === index)!;
    gpu.reservedBytes += a.vramBytes;
    gpu.attempts += 1;
  }
  worker.cpusUsed += a.cpus;
}

/** Whether a worker could take any job at all: a GPU with no job on it, or a free CPU slot. */
function hasRoom(w: WorkerState): boolean {
  return w.cpusUsed < w.cpuSlots || w.gpus.some((g) => g.reservedBytes < g.vramBytes);
}

function cloneWorker(w: WorkerState): WorkerState {
  return { ...w, gpus: w.gpus.map((g) => ({ ...g })), attempts: new Set(w.attempts) };
}

/** Online workers, by id, as copies a round may book places on. */
export function onlineWorkers(cluster: ClusterState): WorkerState[] {
  return [...cluster.workers.values()]
    .filter((w) => w.lifecycle.status === 'online')
    .sort((a, b) => (a.id < b.id ? -1 : 1))
    .map(cloneWorker);
}

/** Whether a worker with nothing on it could hold the candidate. */
export function couldEverHold(
  job: Candidate,
  worker: WorkerState,
  policy: PlacementPolicy,
): boolean {
  const empty: WorkerState = {
    ...worker,
    gpus: worker.gpus.map((g) => ({ ...g, reservedBytes: 0, attempts: 0 })),
    cpusUsed: 0,
    memoryUsed: 0,
    attempts: new Set(),
  };
  return fitOnWorker(job, empty, policy) !== null;
}

/**
 * Places candidates, in the order given, on `workers` (copies: their bookings change): what one
 * round assigns. A candidate that fits nowhere does not hold back a later one that asks less.
 */
export function placeInOrder(
  ordered: Candidate[],
  workers: WorkerState[],
  policy: PlacementPolicy,
): Assignment[] {
  const assignments: Assignment[] = [];
  if (!workers.some(hasRoom)) return assignments;
  const unplaceable = new Set<string>();
  for (const job of ordered) {
    const shape = shapeOf(job);
    if (unplaceable.has(shape)) continue;
    const placed = place(job, workers, policy);
    if (!placed) {
      unplaceable.add(shape);
      continue;
    }
    apply(placed.worker, placed.a, job);
    assignments.push(placed.a);
    if (!hasRoom(placed.worker) && !workers.some(hasRoom)) break;
  }
  return assignments;
}

/**
 * Placement policy v1: walks queued jobs and sessions by priority (aged by their wait) then age
 * and puts each on the first online worker where it fits. A GPU takes a job only if the job's VRAM plus the headroom fits
 * its free memory; a job without declared VRAM takes a GPU alone for its probe, then what the
 * probe measured (one from before probes takes its GPUs alone). A job that fits nowhere does
 * not hold back a later one that asks less. Pure: the cluster state is not changed.
 */
export function plan(cluster: ClusterState, now: Date, policy = DEFAULT_POLICY): Plan {
  const { ready, wakeAt } = placeable(cluster, now, policy);
  const workers = onlineWorkers(cluster);
  if (!workers.some(hasRoom)) return { assignments: [], wakeAt };
  return { assignments: placeInOrder(ready.sort(byPlacementOrder), workers, policy), wakeAt };
}
