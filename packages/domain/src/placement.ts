import { Backfill, withoutKept, type Reservation } from './backfill.ts';
import { anyPreemptible, type Preemption } from './preemption.ts';
import { cloneWorker, type ClusterState, type WorkerState } from './cluster.ts';
import { couldEverHold, fitOnWorker, takesWholeGpus, type Assignment } from './fit.ts';
import type { Candidate } from './candidates.ts';
import { DEFAULT_POLICY, GiB, type PlacementPolicy } from './policy.ts';
import { bookQuota, heldBack, quotaBook, type QuotaBook } from './quota.ts';
import { nextMonthStart } from './usage.ts';
import { drain, type PlacementQueue } from './placement-queue.ts';
import { waitingQueue } from './waiting.ts';

export interface Plan {
  assignments: Assignment[];
  /** The place kept for the first candidate that found none, if one could be worked out. */
  reservation: Reservation | null;
  /** Running attempts to stop so that the first candidate that found no place can start. */
  preemptions: Preemption[];
  /** The earliest time a waiting retry becomes placeable, if any. */
  wakeAt: Date | null;
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
  /** The candidate it is reserved for. */
  head: Candidate;
}

/** Whether a candidate is charged to the same owner, or team, as `head`. */
const sharesQuota = (c: Candidate, head: Candidate) =>
  c.owner === head.owner || (head.teamAccount !== null && c.teamAccount === head.teamAccount);

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
 * this round. With `kept`, the reserved worker is judged as `kept.view` sees it; workers `held`
 * for a gang are passed over.
 */
function place(
  job: Candidate,
  workers: WorkerState[],
  room: Room[],
  policy: PlacementPolicy,
  from: number,
  kept: Kept | null,
  held: ReadonlySet<number> | null,
) {
  let best: { worker: WorkerState; a: Assignment; firstFit: number; index: number } | null = null;
  const least = leastRoom(job, policy);
  for (let i = from; i < workers.length; i++) {
    const worker = workers[i]!;
    if (held?.has(i) || (least && !roomFor(least, room[i]!))) continue;
    const a = fitOnWorker(job, i === kept?.index ? kept.view : worker, policy);
    if (!a) continue;
    if (!job.probe || a.gpus.length === 0) return { worker, a, firstFit: i, index: i };
    if (!best) best = { worker, a, firstFit: i, index: i };
    else if (smallestGpu(worker, a) > smallestGpu(best.worker, best.a))
      best = { worker, a, firstFit: best.firstFit, index: i };
  }
  return best;
}

/**
 * Where a gang job goes: the first `nodes` workers from `from` that each hold one member, or
 * null when fewer do. `firstFit` is the first of them, as for `place`.
 */
function placeGang(
  job: Candidate,
  workers: WorkerState[],
  room: Room[],
  policy: PlacementPolicy,
  from: number,
  kept: Kept | null,
  held: ReadonlySet<number> | null,
) {
  const members: { worker: WorkerState; a: Assignment; index: number }[] = [];
  const least = leastRoom(job, policy);
  for (let i = from; i < workers.length && members.length < job.nodes; i++) {
    const worker = workers[i]!;
    if (held?.has(i) || (least && !roomFor(least, room[i]!))) continue;
    const a = fitOnWorker(job, i === kept?.index ? kept.view : worker, policy);
    if (a) members.push({ worker, a, index: i });
  }
  return members.length === job.nodes ? { members, firstFit: members[0]!.index } : null;
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

/**
 * The workers a gang that fits on too few could take a member on now, held for it; null unless
 * enough workers could hold a member once what runs on them is expected to end (time limits,
 * maximum lives): holding some while the rest run unbounded work would only keep them idle.
 */
function holdForGang(
  job: Candidate,
  workers: WorkerState[],
  policy: PlacementPolicy,
  backfill: Backfill,
) {
  const held = new Set<number>();
  let could = 0;
  workers.forEach((w, i) => {
    if (fitOnWorker(job, w, policy)) {
      held.add(i);
      could++;
    } else if (backfill.freesUp(w.id) && couldEverHold(job, w, policy)) could++;
  });
  return could >= job.nodes ? { workers: held, gpus: job.resources.gpus > 0 } : null;
}

/** A placement on one worker, as a gang's is: its only member. */
function oneMember(placed: ReturnType<typeof place>) {
  return placed && { members: [placed], firstFit: placed.firstFit };
}

/** What a gang's member beyond rank 0 holds, as its `JobAssigned` records it. */
const memberPlacement = ({ workerId, gpus, vramBytes, cpus }: Assignment) => ({
  workerId,
  gpus,
  vramBytes,
  cpus,
});

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
 * Whether enough workers may have room for a job (`leastRoom`), one for each of its nodes. Each
 * least room is counted once a round: room only shrinks in a round, so a count stays an upper
 * bound, and a job it rules out finds no place anyway, without a walk over every worker.
 */
function roomCount(room: Room[], policy: PlacementPolicy) {
  const counted = new Map<string, number>();
  return (job: Candidate): boolean => {
    const least = leastRoom(job, policy);
    if (!least) return true;
    const key = `${least.idleGpus}:${least.mostFreeBytes}`;
    let count = counted.get(key);
    if (count === undefined) {
      count = 0;
      for (const r of room) if (roomFor(least, r)) count++;
      counted.set(key, count);
    }
    return count >= job.nodes;
  };
}

/**
 * Places candidates, in the order `queue` gives them, on `workers` (copies: their bookings
 * change): what one round assigns. A candidate that fits nowhere does not hold back a later one
 * that asks less, and one its owner's quota holds back does not hold back others of its shape.
 * With `backfill`, the first candidate with GPUs that fits nowhere gets a reservation, and later
 * ones that would run past it may not take its place.
 */
export function placeInOrder(
  queue: PlacementQueue,
  workers: WorkerState[],
  policy: PlacementPolicy,
  quota?: QuotaBook,
  backfill?: Backfill,
): Assignment[] {
  const assignments: Assignment[] = [];
  if (!workers.some(hasRoom)) {
    if (backfill) roomForFirst(queue, workers, policy, quota, backfill);
    return assignments;
  }
  // What this round's marks on shapes are known by: no other round's.
  const round = {};
  const room = workers.map(roomOf);
  const roomy = roomCount(room, policy);
  let kept: Kept | null = null;
  /**
   * The workers that the first gang that found too few, with no reservation kept before it,
   * could take a member on now: later work may not take them, so that it gathers workers as
   * they free up rather than wait behind smaller work for ever.
   */
  let held: { workers: Set<number>; gpus: boolean } | null = null;
  const fit = (c: Candidate, w: WorkerState) => fitOnWorker(c, w, policy);
  // What the loop would pass over at once, passed over with the rest of its family.
  queue.skip = (c) =>
    c.mark.round === round &&
    (c.mark.unplaceable ||
      (kept !== null && c.mark.unplaceableLate && !backfill!.explaining && backfill!.late(c)));
  for (const job of drain(queue)) {
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
    // What would run past the reservation sees its GPUs full, and so fits in less, and may not
    // take what the quotas of the reserved candidate's owner and team keep for it.
    const late = kept !== null && backfill!.late(job);
    // Unless the round explains why, a shape that fits nowhere is passed over at once.
    if (late && mark.unplaceableLate && !backfill!.explaining) continue;
    if (heldBack(job, quota)) continue;
    if (late && sharesQuota(job, kept!.head) && heldBack(job, kept!.quota)) {
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
    // What is held for a gang is kept from work that takes what it needs: GPUs, or CPU slots.
    const passOver = held && held.gpus === job.resources.gpus > 0 ? held.workers : null;
    const placed = !roomy(job)
      ? null
      : job.nodes === 1
        ? oneMember(place(job, workers, room, policy, from, late ? kept : null, passOver))
        : placeGang(job, workers, room, policy, from, late ? kept : null, passOver);
    if (!placed) {
      if (late) {
        mark.unplaceableLate = true;
        mark.keptOut = fit(job, workers[kept!.index]!) !== null;
        mark.keptOutVersion = kept!.version;
        if (mark.keptOut) backfill!.noteKeptOut(job);
        continue;
      }
      mark.unplaceable = true;
      if (backfill && job.nodes > 1 && kept === null && held === null) {
        held = holdForGang(job, workers, policy, backfill);
        if (held) continue;
      }
      if (backfill && !backfill.tried && !held && job.resources.gpus > 0 && job.nodes === 1) {
        const r = backfill.forHead(job, workers, fit);
        if (r) {
          const view = withoutKept(workers[r.index]!, r, job);
          kept = { index: r.index, view, quota: withBooked(quota, job), version: 0, head: job };
        }
      }
      continue;
    }
    if (late) mark.lateStartAt = placed.firstFit;
    else mark.startAt = placed.firstFit;
    bookQuota(job, quota);
    if (kept) bookQuota(job, kept.quota);
    for (const { worker, a, index } of placed.members) {
      apply(worker, a, job);
      if (index === kept?.index) {
        apply(kept.view, a, job);
        kept.version++;
      }
      backfill?.placed(job, a);
      room[index] = roomOf(worker);
    }
    const [rank0, ...others] = placed.members.map((m) => m.a);
    assignments.push(
      others.length === 0 ? rank0! : { ...rank0!, members: others.map(memberPlacement) },
    );
    if (!placed.members.some((m) => hasRoom(m.worker)) && !workers.some(hasRoom)) {
      if (backfill && !backfill.tried && !held)
        roomForFirst(queue, workers, policy, quota, backfill);
      break;
    }
  }
  return assignments;
}

/**
 * With no room left, nothing more is placed, but the first candidates with GPUs that their quota
 * does not hold back (one of each shape, until room is kept for one) may still have attempts
 * stopped for them, or be told when they may start.
 */
function roomForFirst(
  queue: PlacementQueue,
  workers: WorkerState[],
  policy: PlacementPolicy,
  quota: QuotaBook | undefined,
  backfill: Backfill,
): void {
  const fit = (c: Candidate, w: WorkerState) => fitOnWorker(c, w, policy);
  const shapes = new Set<string>();
  queue.skip = (c) => c.resources.gpus === 0 || c.nodes > 1 || shapes.has(c.shape);
  for (const c of drain(queue)) {
    if (backfill.tried) return;
    if (heldBack(c, quota)) continue;
    shapes.add(c.shape);
    backfill.forHead(c, workers, fit);
  }
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
  const { queue, wakeAt: retryAt } = waitingQueue(cluster, now, policy);
  // Work an hour quota holds back may go when the month turns, whatever else happens by then.
  const monthTurns = cluster.hourQuotas.size > 0 ? nextMonthStart(now) : null;
  const wakeAt =
    retryAt && monthTurns ? (monthTurns < retryAt ? monthTurns : retryAt) : (retryAt ?? monthTurns);
  const workers = onlineWorkers(cluster);
  // A full cluster places nothing; only stopping preemptible work could make room in it.
  if (!workers.some(hasRoom) && !anyPreemptible(cluster))
    return { assignments: [], reservation: null, preemptions: [], wakeAt };
  const quota = quotaBook(cluster, now);
  const backfill = new Backfill(cluster, now.getTime(), policy);
  const assignments = placeInOrder(queue, workers, policy, quota, backfill);
  return {
    assignments,
    reservation: backfill.reservation,
    preemptions: backfill.preemptions,
    wakeAt,
  };
}
