import { Backfill, withoutKept, type Reservation } from './backfill.ts';
import { preemptionsFor, type Preemption } from './preemption.ts';
import { cloneWorker, type ClusterState, type GpuUsage, type WorkerState } from './cluster.ts';
import { inPlacementOrder, placeable, type Candidate } from './candidates.ts';
import { DEFAULT_POLICY, GiB, type PlacementPolicy } from './policy.ts';
import { bookQuota, heldBack, quotaBook, type QuotaBook } from './quota.ts';
import { nextMonthStart } from './usage.ts';

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
  /** The place kept for the first candidate that found none, if one could be worked out. */
  reservation: Reservation | null;
  /** Running attempts to stop so that the first candidate that found no place can start. */
  preemptions: Preemption[];
  /** The earliest time a waiting retry becomes placeable, if any. */
  wakeAt: Date | null;
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

/** The smallest memory among an assignment's GPUs: a probe goes where it is largest. */
function smallestGpu(worker: WorkerState, a: Assignment): number {
  return Math.min(...a.gpus.map((i) => worker.gpus.find((g) => g.index === i)!.vramBytes));
}

/** A reserved worker as later work that would run past the reservation sees it. */
interface Kept {
  index: number;
  view: WorkerState;
  /** The quotas as that work sees them: with what the reserved candidate will need booked. */
  quota: QuotaBook | undefined;
  /** How many placements the reserved worker has taken since: what `keptOut` marks go by. */
  version: number;
}

/** A quota book with `head`'s GPUs booked too, apart from `quota`. */
function withBooked(quota: QuotaBook | undefined, head: Candidate): QuotaBook | undefined {
  if (!quota) return undefined;
  const book = { ...quota, held: new Map(quota.held) };
  bookQuota(head, book);
  return book;
}

/**
 * Where a job goes: the first worker it fits on, from `from`; a probe, the one with the largest
 * GPUs. `firstFit` is the first worker it fits on: none before it can take its shape again in
 * this round. With `kept`, the reserved worker is judged as `kept.view` sees it.
 */
function place(
  job: Candidate,
  workers: WorkerState[],
  room: Room[],
  policy: PlacementPolicy,
  from: number,
  kept: Kept | null,
) {
  let best: { worker: WorkerState; a: Assignment; firstFit: number; index: number } | null = null;
  const least = leastRoom(job, policy);
  for (let i = from; i < workers.length; i++) {
    const worker = workers[i]!;
    if (least && !roomFor(least, room[i]!)) continue;
    const a = fitOnWorker(job, i === kept?.index ? kept.view : worker, policy);
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

/** Online workers, by id, as copies a round may book places on. */
export function onlineWorkers(cluster: ClusterState): WorkerState[] {
  return [...cluster.workers.values()]
    .filter((w) => w.lifecycle.status === 'online')
    .sort((a, b) => (a.id < b.id ? -1 : 1))
    .map(cloneWorker);
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
 * round assigns. A candidate that fits nowhere does not hold back a later one that asks less, and
 * one its owner's quota holds back does not hold back others of its shape. With `backfill`, the
 * first candidate with GPUs that fits nowhere gets a reservation, and later ones that would run
 * past it may not take its place.
 */
export function placeInOrder(
  ordered: Candidate[],
  workers: WorkerState[],
  policy: PlacementPolicy,
  quota?: QuotaBook,
  backfill?: Backfill,
): Assignment[] {
  const assignments: Assignment[] = [];
  if (!workers.some(hasRoom)) {
    if (backfill?.explaining) reserveForFirst(ordered, workers, policy, quota, backfill);
    return assignments;
  }
  // What this round's marks on shapes are known by: no other round's.
  const round = {};
  const room = workers.map(roomOf);
  let kept: Kept | null = null;
  const fit = (c: Candidate, w: WorkerState) => fitOnWorker(c, w, policy);
  for (const job of ordered) {
    // Capacity only shrinks within a round: a worker a shape did not fit on stays so.
    const mark = job.mark;
    if (mark.round !== round) {
      mark.round = round;
      mark.unplaceable = false;
      mark.startAt = 0;
      mark.unplaceableLate = false;
      mark.lateStartAt = 0;
      mark.keptOut = false;
      mark.keptOutVersion = -1;
    }
    if (mark.unplaceable) continue;
    if (heldBack(job, quota)) continue;
    // What would run past the reservation sees its GPUs full, and so fits in less, and may not
    // take what the quotas of the reserved candidate's owner and team keep for it.
    const late = kept !== null && backfill!.late(job);
    if (late && heldBack(job, kept!.quota)) {
      backfill!.noteKeptOut(job);
      continue;
    }
    if (late && mark.unplaceableLate) {
      if (backfill!.explaining && mark.keptOutVersion !== kept!.version) {
        mark.keptOut = fit(job, workers[kept!.index]!) !== null;
        mark.keptOutVersion = kept!.version;
      }
      if (mark.keptOut) backfill!.noteKeptOut(job);
      continue;
    }
    const from = late ? Math.max(mark.startAt, mark.lateStartAt) : mark.startAt;
    const placed = place(job, workers, room, policy, from, late ? kept : null);
    if (!placed) {
      if (late) {
        mark.unplaceableLate = true;
        mark.keptOut = fit(job, workers[kept!.index]!) !== null;
        mark.keptOutVersion = kept!.version;
        if (mark.keptOut) backfill!.noteKeptOut(job);
        continue;
      }
      mark.unplaceable = true;
      if (backfill && !backfill.tried && job.resources.gpus > 0) {
        const r = backfill.reserve(job, workers, fit);
        if (r) {
          const view = withoutKept(workers[r.index]!, r, job);
          kept = { index: r.index, view, quota: withBooked(quota, job), version: 0 };
        }
      }
      continue;
    }
    if (late) mark.lateStartAt = placed.firstFit;
    else mark.startAt = placed.firstFit;
    bookQuota(job, quota);
    if (kept) bookQuota(job, kept.quota);
    apply(placed.worker, placed.a, job);
    if (placed.index === kept?.index) {
      apply(kept.view, placed.a, job);
      kept.version++;
    }
    backfill?.placed(job, placed.a);
    room[placed.index] = roomOf(placed.worker);
    assignments.push(placed.a);
    if (!hasRoom(placed.worker) && !workers.some(hasRoom)) {
      if (backfill?.explaining && !backfill.tried) {
        const rest = ordered.slice(ordered.indexOf(job) + 1);
        reserveForFirst(rest, workers, policy, quota, backfill);
      }
      break;
    }
  }
  return assignments;
}

/**
 * With no room left, nothing more is placed, but the first candidate with GPUs that its quota
 * does not hold back is still told when it is expected to start: for explanations.
 */
function reserveForFirst(
  ordered: Candidate[],
  workers: WorkerState[],
  policy: PlacementPolicy,
  quota: QuotaBook | undefined,
  backfill: Backfill,
): void {
  const first = ordered.find((c) => c.resources.gpus > 0 && !heldBack(c, quota));
  if (first) backfill.reserve(first, workers, (c, w) => fitOnWorker(c, w, policy));
}

/**
 * Placement policy: walks queued jobs and sessions by priority (aged by their wait) then age and
 * puts each on the first online worker where it fits. A GPU takes a job only if the job's VRAM
 * plus the headroom fits its free memory; a job without declared VRAM takes a GPU alone for its
 * probe, then what the probe measured (one from before probes takes its GPUs alone). A job that
 * fits nowhere does not hold back a later one that asks less, except on the place reserved for
 * the first such job with GPUs (`Backfill`): there, only work expected to end before it is due
 * may start. Work that would take its owner past their quota waits. Pure: the cluster state is
 * not changed.
 */
export function plan(cluster: ClusterState, now: Date, policy = DEFAULT_POLICY): Plan {
  const { ready, wakeAt: retryAt } = placeable(cluster, now, policy);
  // Work an hour quota holds back may go when the month turns, whatever else happens by then.
  const monthTurns = cluster.hourQuotas.size > 0 ? nextMonthStart(now) : null;
  const wakeAt =
    retryAt && monthTurns ? (monthTurns < retryAt ? monthTurns : retryAt) : (retryAt ?? monthTurns);
  const workers = onlineWorkers(cluster);
  const ordered = inPlacementOrder(ready);
  const quota = quotaBook(cluster, now);
  const backfill = new Backfill(cluster, now.getTime(), policy);
  const assignments = workers.some(hasRoom)
    ? placeInOrder(ordered, workers, policy, quota, backfill)
    : [];
  const head = backfill.tried ? backfill.head : firstWaiting(ordered, assignments, quota);
  const fit = (c: Candidate, w: WorkerState) => fitOnWorker(c, w, policy);
  return {
    assignments,
    reservation: backfill.reservation,
    preemptions: head ? preemptionsFor(head, cluster, workers, fit) : [],
    wakeAt,
  };
}

/**
 * The first candidate with GPUs that a round left waiting, though its quota does not hold it
 * back: the one a reservation, or a preemption, is for.
 */
export function firstWaiting(
  ordered: Candidate[],
  assignments: Assignment[],
  quota: QuotaBook | undefined,
): Candidate | undefined {
  const placed = new Set(assignments.map((a) => a.id));
  return ordered.find((c) => c.resources.gpus > 0 && !placed.has(c.id) && !heldBack(c, quota));
}
