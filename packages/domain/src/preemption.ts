import { cloneWorker, type ClusterState, type WorkerState } from './cluster.ts';
import type { Candidate } from './candidates.ts';
import { free, type Fit, type LiveHolding } from './holding.ts';

/** A running attempt to stop so that `by`, which waits, can take its place. */
export interface Preemption {
  jobId: string;
  attemptId: string;
  workerId: string;
  /** The job or session it makes room for. */
  by: string;
}

/** A live attempt as preemption weighs it. */
interface Victim {
  jobId: string;
  attemptId: string;
  holding: LiveHolding;
}

/**
 * Whether any running attempt of a priority below `priority` could be preempted; with no bound,
 * what a full cluster's round looks for.
 */
export function anyPreemptible(cluster: ClusterState, priority = Infinity): boolean {
  for (const on of cluster.holding.weighed.values())
    for (const h of on.values())
      if (h.preemptible && !h.stopping && h.priority < priority) return true;
  return false;
}

/** Fewer victims first, then the lower their highest priority. */
const better = (a: Victim[], b: Victim[]) =>
  a.length - b.length ||
  Math.max(...a.map((v) => v.holding.priority)) - Math.max(...b.map((v) => v.holding.priority));

/**
 * Whether no choice among `victims` could be `better` than `best`: best stops one attempt, and
 * none of these is of a lower priority than it.
 */
function cannotBeat(victims: readonly Victim[], best: Victim[] | undefined): boolean {
  if (best?.length !== 1) return false;
  const bar = best[0]!.holding.priority;
  return victims.every((v) => v.holding.priority >= bar);
}

/** Where the head goes once some attempts are stopped: the worker, its GPUs, and the stops. */
export interface PreemptionPlan {
  /** The worker's index among the round's workers. */
  index: number;
  workerId: string;
  gpus: number[];
  stops: Preemption[];
}

/** Where the head fits on `worker` once `stopping` and `victims` have freed their places. */
function fitFreed(
  worker: WorkerState,
  stopping: readonly LiveHolding[],
  victims: readonly Victim[],
  head: Candidate,
  fit: Fit,
) {
  const freed = cloneWorker(worker);
  for (const h of stopping) free(freed, h);
  for (const v of victims) free(freed, v.holding);
  return fit(head, freed);
}

/**
 * The victims of `taken` the head needs: each is dropped, the highest priority first, where the
 * head fits without it (one that shares a GPU with work that stays, or holds a CPU slot, or a
 * GPU of another model, frees nothing the head can use).
 */
function needed(
  worker: WorkerState,
  stopping: readonly LiveHolding[],
  taken: Victim[],
  head: Candidate,
  fit: Fit,
): Victim[] {
  const kept = [...taken];
  for (let i = kept.length - 1; i >= 0; i--) {
    const without = kept.filter((_, j) => j !== i);
    if (fitFreed(worker, stopping, without, head, fit)) kept.splice(i, 1);
  }
  return kept;
}

/**
 * What to stop so that `head`, the first candidate that waits for room, can start: on the
 * worker where it takes the fewest, running attempts of preemptible jobs of a lower priority
 * than the head's own (lowest priority first, then the most recently started, which loses the
 * least work), and only those the head needs. None while what is being stopped already would
 * make room for it (a reservation then keeps that room), nor where stopping every such attempt
 * would not. Asked only for a head that fits on none of `workers` as they stand.
 */
export function preemptionsFor(
  head: Candidate,
  cluster: ClusterState,
  workers: readonly WorkerState[],
  fit: Fit,
): PreemptionPlan | null {
  if (head.resources.gpus === 0 || !anyPreemptible(cluster, head.basePriority)) return null;
  const sessionsStopping = new Map<string, LiveHolding[]>();
  for (const session of cluster.holding.sessions.values()) {
    if (!session.stopping) continue;
    const on = sessionsStopping.get(session.workerId);
    if (on) on.push(session);
    else sessionsStopping.set(session.workerId, [session]);
  }
  /** What is being stopped on a worker, and what may be stopped there for the head. */
  const weighedOn = (workerId: string) => {
    const sessions = sessionsStopping.get(workerId);
    const weighed = cluster.holding.weighed.get(workerId);
    if (!sessions && !weighed) return null;
    const stopping = [...(sessions ?? [])];
    const victims: Victim[] = [];
    for (const [jobId, holding] of weighed ?? []) {
      if (holding.stopping) stopping.push(holding);
      else if (holding.preemptible && holding.priority < head.basePriority)
        victims.push({ jobId, attemptId: holding.attemptId, holding });
    }
    return { stopping, victims };
  };
  let best: { index: number; victims: Victim[]; stopping: LiveHolding[] } | null = null;
  for (let index = 0; index < workers.length; index++) {
    const worker = workers[index]!;
    const on = weighedOn(worker.id);
    if (!on) continue;
    if (
      on.stopping.length === 0 &&
      (on.victims.length === 0 || cannotBeat(on.victims, best?.victims))
    )
      continue;
    const freed = cloneWorker(worker);
    for (const h of on.stopping) free(freed, h);
    // Room is on its way: the head waits for it rather than stop more.
    if (fit(head, freed)) return null;
    const order = [...on.victims].sort(
      (a, b) =>
        a.holding.priority - b.holding.priority ||
        (b.holding.startedMs ?? Number.MAX_SAFE_INTEGER) -
          (a.holding.startedMs ?? Number.MAX_SAFE_INTEGER) ||
        (a.jobId < b.jobId ? -1 : 1),
    );
    const taken: Victim[] = [];
    for (const v of order) {
      free(freed, v.holding);
      taken.push(v);
      if (!fit(head, freed)) continue;
      const victims = needed(worker, on.stopping, taken, head, fit);
      if (!best || better(victims, best.victims) < 0)
        best = { index, victims, stopping: on.stopping };
      break;
    }
  }
  if (!best) return null;
  const worker = workers[best.index]!;
  const placed = fitFreed(worker, best.stopping, best.victims, head, fit)!;
  return {
    index: best.index,
    workerId: worker.id,
    gpus: placed.gpus,
    stops: best.victims.map((v) => ({
      jobId: v.jobId,
      attemptId: v.attemptId,
      workerId: worker.id,
      by: head.id,
    })),
  };
}
