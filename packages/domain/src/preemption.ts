import { cloneWorker, type ClusterState, type WorkerState } from './cluster.ts';
import type { Candidate } from './candidates.ts';
import { free, type Fit } from './backfill.ts';
import type { LiveHolding } from './holding.ts';

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

/** Fewer victims first, then the lower their highest priority, then the earlier worker. */
const better = (a: Victim[], b: Victim[]) =>
  a.length - b.length ||
  Math.max(...a.map((v) => v.holding.priority)) - Math.max(...b.map((v) => v.holding.priority));

/**
 * What to stop so that `head`, the first candidate that waits for room, can start: on the
 * worker where it takes the fewest, running attempts of preemptible jobs of a lower priority
 * than the head's own (lowest priority first, then the most recently started, which loses the
 * least work). Nothing while what is being stopped already would make room for it, nor where
 * stopping every such attempt would not.
 */
export function preemptionsFor(
  head: Candidate,
  cluster: ClusterState,
  workers: readonly WorkerState[],
  fit: Fit,
): Preemption[] {
  if (head.resources.gpus === 0) return [];
  const byWorker = new Map<string, { stopping: LiveHolding[]; victims: Victim[] }>();
  let anyVictim = false;
  for (const [jobId, holding] of cluster.holding.jobs) {
    const stopping = holding.stopping;
    const victim = !stopping && holding.preemptible && holding.priority < head.basePriority;
    if (!stopping && !victim) continue;
    let on = byWorker.get(holding.workerId);
    if (!on) byWorker.set(holding.workerId, (on = { stopping: [], victims: [] }));
    if (stopping) on.stopping.push(holding);
    else {
      const attemptId = cluster.jobs.get(jobId)?.state.attempts.at(-1)?.id;
      if (attemptId) on.victims.push({ jobId, attemptId, holding });
      anyVictim ||= attemptId !== undefined;
    }
  }
  if (!anyVictim) return [];
  for (const session of cluster.holding.sessions.values()) {
    if (!session.stopping) continue;
    let on = byWorker.get(session.workerId);
    if (!on) byWorker.set(session.workerId, (on = { stopping: [], victims: [] }));
    on.stopping.push(session);
  }
  let best: { worker: WorkerState; victims: Victim[] } | null = null;
  for (const worker of workers) {
    const on = byWorker.get(worker.id);
    if (!on) continue;
    const freed = cloneWorker(worker);
    for (const h of on.stopping) free(freed, h);
    // Room is on its way: the head waits for it rather than stop more.
    if (fit(head, freed)) return [];
    const order = [...on.victims].sort(
      (a, b) =>
        a.holding.priority - b.holding.priority ||
        (b.holding.startedMs ?? Number.MAX_SAFE_INTEGER) -
          (a.holding.startedMs ?? Number.MAX_SAFE_INTEGER) ||
        (a.jobId < b.jobId ? -1 : 1),
    );
    const taken: Victim[] = [];
    for (const v of order) {
      if (best && taken.length >= best.victims.length) break;
      free(freed, v.holding);
      taken.push(v);
      if (!fit(head, freed)) continue;
      if (!best || better(taken, best.victims) < 0) best = { worker, victims: [...taken] };
      break;
    }
  }
  if (!best) return [];
  return best.victims.map((v) => ({
    jobId: v.jobId,
    attemptId: v.attemptId,
    workerId: best.worker.id,
    by: head.id,
  }));
}
