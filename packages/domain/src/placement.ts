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

/**
 * What a candidate is placed by: its priority, plus the whole points it gained waiting since
 * `queuedAtMs`.
 */
export function effectivePriority(
  priority: number,
  queuedAtMs: number,
  now: Date,
  policy: Pick<PlacementPolicy, 'agingPerHour'>,
): number {
  const waitedMs = now.getTime() - queuedAtMs;
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
  /** What it asks of a worker, as a key: see `shapeKey`. */
  shape: string;
  /** The job or session as the cluster state tracks it. */
  tracked: TrackedJob | TrackedSession | null;
}

/**
 * Candidates as made for each tracked job or session: the cluster fold replaces the tracked
 * object whenever its job or session changes, so a candidate is made once per change, and only
 * its aged priority is worked out again each round.
 */
const candidates = new WeakMap<TrackedJob | TrackedSession, Candidate>();

function jobCandidate(job: TrackedJob, aged: Aged): Candidate | null {
  const spec = job.state.spec;
  if (!spec) return null;
  let c = candidates.get(job);
  if (!c) {
    const container = runsInContainer(spec);
    const memoryBytes = memoryNeed(job.state);
    const { estimate } = job.state;
    const probe = probesNext(job.state);
    c = {
      kind: 'job',
      id: job.state.id,
      resources: spec.resources,
      priority: 0,
      queuedSeq: job.queuedSeq,
      container,
      estimate,
      probe,
      memoryBytes,
      shape: shapeKey('job', container, spec.resources, estimate, memoryBytes, probe),
      tracked: job,
    };
    candidates.set(job, c);
  }
  c.priority = aged(spec.priority, job.queuedAtMs);
  return c;
}

function sessionCandidate(session: TrackedSession, aged: Aged): Candidate | null {
  const spec = session.state.spec;
  if (!spec) return null;
  let c = candidates.get(session);
  if (!c) {
    const container = session.state.image !== null;
    const memoryBytes = sessionMemoryNeed(session.state);
    c = {
      kind: 'session',
      id: session.state.id,
      resources: spec.resources,
      priority: 0,
      queuedSeq: session.queuedSeq,
      container,
      estimate: null,
      probe: false,
      memoryBytes,
      shape: shapeKey('session', container, spec.resources, null, memoryBytes),
      tracked: session,
    };
    candidates.set(session, c);
  }
  c.priority = aged(0, session.queuedAtMs);
  return c;
}

/** A priority aged by the wait since `queuedAtMs`. */
type Aged = (priority: number, queuedAtMs: number) => number;

/** Jobs and sessions that may be placed now (in no order), and when the next retry comes due. */
export function placeable(
  cluster: ClusterState,
  now: Date,
  policy: PlacementPolicy,
): { ready: Candidate[]; wakeAt: Date | null } {
  const aged: Aged = (priority, queuedAtMs) => effectivePriority(priority, queuedAtMs, now, policy);
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

const byQueuedSeq = (a: Candidate, b: Candidate) => a.queuedSeq - b.queuedSeq;

/**
 * Candidates in placement order: higher (aged) priority first, then the one queued longest.
 * Priorities take few values, so each is a
 * bucket of its own; within one, candidates come mostly in the order they were queued, which the
 * sort takes in a few passes: far fewer comparisons than sorting the whole queue.
 */
export function inPlacementOrder(candidates: Candidate[]): Candidate[] {
  const buckets = new Map<number, Candidate[]>();
  for (const c of candidates) {
    const bucket = buckets.get(c.priority);
    if (bucket) bucket.push(c);
    else buckets.set(c.priority, [c]);
  }
  const ordered: Candidate[] = [];
  for (const priority of [...buckets.keys()].sort((a, b) => b - a)) {
    for (const c of buckets.get(priority)!.sort(byQueuedSeq)) ordered.push(c);
  }
  return ordered;
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

/**
 * What a job or session asks of a worker, as a key. Within one round capacity only shrinks, so
 * once a job finds no place, no later job that asks the same finds one either.
 */
export function shapeKey(
  kind: Candidate['kind'],
  container: boolean,
  resources: Resources,
  estimate: Estimate | null,
  memoryBytes: number,
  probe = false,
): string {
  const { gpus, vramGb, cpus, gpuModel, memoryGb } = resources;
  return JSON.stringify([
    kind,
    container,
    memoryGb !== undefined,
    gpus,
    gpus === 0 ? (cpus ?? 1) : null,
    vramGb ?? null,
    gpuModel ?? null,
    estimate?.vramBytes ?? null,
    probe,
    memoryBytes,
  ]);
}

/** The smallest memory among an assignment's GPUs: a probe goes where it is largest. */
function smallestGpu(worker: WorkerState, a: Assignment): number {
  return Math.min(...a.gpus.map((i) => worker.gpus.find((g) => g.index === i)!.vramBytes));
}

/** Where a job goes: the first worker it fits on; a probe, the one with the largest GPUs. */
/**
 * Where a job goes: the first worker it fits on, from `from`; a probe, the one with the largest
 * GPUs. `firstFit` is the first worker it fits on: none before it can take its shape again in
 * this round.
 */
function place(
  job: Candidate,
  workers: WorkerState[],
  room: Room[],
  policy: PlacementPolicy,
  from: number,
) {
  let best: { worker: WorkerState; a: Assignment; firstFit: number; index: number } | null = null;
  const least = leastRoom(job, policy);
  for (let i = from; i < workers.length; i++) {
    const worker = workers[i]!;
    if (least && !roomFor(least, room[i]!)) continue;
    const a = fitOnWorker(job, worker, policy);
    if (!a) continue;
    if (!job.probe || a.gpus.length === 0) return { worker, a, firstFit: i, index: i };
    if (!best) best = { worker, a, firstFit: i, index: i };
    else if (smallestGpu(worker, a) > smallestGpu(best.worker, best.a))
      best = { worker, a, firstFit: best.firstFit, index: i };
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

/** A copy to book places on: its GPUs and counters are its own; what it runs is not copied. */
function cloneWorker(w: WorkerState): WorkerState {
  return { ...w, gpus: w.gpus.map((g) => ({ ...g })) };
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

/** What a worker has left, at a glance: its GPUs with nothing on them, and the most memory free on one. */
interface Room {
  idleGpus: number;
  mostFreeBytes: number;
}

function roomOf(worker: WorkerState): Room {
  let idleGpus = 0;
  let mostFreeBytes = 0;
  for (const g of worker.gpus) {
    if (g.attempts === 0) idleGpus++;
    mostFreeBytes = Math.max(mostFreeBytes, g.vramBytes - g.reservedBytes);
  }
  return { idleGpus, mostFreeBytes };
}

/**
 * The least room a job could fit in, where it can be said without looking at each GPU: whole
 * GPUs with nothing on them, or its declared memory plus the headroom on one GPU. Null for what
 * needs a closer look (a CPU job, a measured one).
 */
function leastRoom(job: Candidate, policy: PlacementPolicy): Room | null {
  const { gpus, vramGb } = job.resources;
  if (gpus === 0 || job.estimate) return null;
  if (takesWholeGpus(job)) return { idleGpus: gpus, mostFreeBytes: 0 };
  return { idleGpus: 0, mostFreeBytes: Math.ceil(vramGb! * GiB) + policy.headroomBytes };
}

const roomFor = (least: Room, room: Room) =>
  room.idleGpus >= least.idleGpus && room.mostFreeBytes >= least.mostFreeBytes;

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
  // Capacity only shrinks within a round: a worker a shape did not fit on stays so.
  const startAt = new Map<string, number>();
  const room = workers.map(roomOf);
  for (const job of ordered) {
    const shape = job.shape;
    if (unplaceable.has(shape)) continue;
    const placed = place(job, workers, room, policy, startAt.get(shape) ?? 0);
    if (!placed) {
      unplaceable.add(shape);
      continue;
    }
    startAt.set(shape, placed.firstFit);
    apply(placed.worker, placed.a, job);
    room[placed.index] = roomOf(placed.worker);
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
  return { assignments: placeInOrder(inPlacementOrder(ready), workers, policy), wakeAt };
}
