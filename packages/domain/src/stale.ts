/** Attempts and session runs the log still gives to workers that no longer hold them. */
import type { ClusterState } from './cluster.ts';
import { membersOf } from './job/gang.ts';
import { slotHolder } from './job/state.ts';
import { runHolder } from './session/state.ts';

/** A live attempt (assigned or running) held by a worker. */
export interface HeldAttempt {
  jobId: string;
  attemptId: string;
  workerId: string;
}

/**
 * Attempts the log still gives to a worker that no longer runs them: every live attempt of a
 * worker that is lost or left, and, for a worker that registered again, every live attempt
 * assigned before that registration that it did not report as still running. Pass `workerId`
 * to look at one worker only. The scheduler fails them as platform failures.
 */
export function staleAttempts(cluster: ClusterState, workerId?: string): HeldAttempt[] {
  const stale: HeldAttempt[] = [];
  for (const job of cluster.jobs.values()) {
    const attempt = slotHolder(job.state);
    if (!attempt) continue;
    for (const m of membersOf(attempt)) {
      if (workerId !== undefined && m.workerId !== workerId) continue;
      // A gang's member that ended holds nothing of its worker's any more.
      if (attempt.memberEnds.some((e) => e.rank === m.rank)) continue;
      const worker = cluster.workers.get(m.workerId);
      const gone =
        !worker ||
        worker.lifecycle.status !== 'online' ||
        (job.attemptSeq < worker.registeredSeq && !worker.reportedRunning.has(m.id));
      if (gone) stale.push({ jobId: job.state.id, attemptId: m.id, workerId: m.workerId });
    }
  }
  return stale;
}

/** A live run of a session held by a worker. */
export interface HeldRun {
  sessionId: string;
  runId: string;
  workerId: string;
}

/**
 * Session runs the log still gives to a worker that no longer holds them, as `staleAttempts`
 * finds attempts: a run does not outlive its worker's restart, so a worker that registered again
 * holds none from before. The scheduler places those sessions again.
 */
export function staleRuns(cluster: ClusterState, workerId?: string): HeldRun[] {
  const stale: HeldRun[] = [];
  for (const session of cluster.sessions.values()) {
    const run = runHolder(session.state);
    if (!run || (workerId !== undefined && run.workerId !== workerId)) continue;
    const worker = cluster.workers.get(run.workerId);
    const gone =
      !worker ||
      worker.lifecycle.status !== 'online' ||
      (session.runSeq < worker.registeredSeq && !worker.reportedRunning.has(run.id));
    if (gone) stale.push({ sessionId: session.state.id, runId: run.id, workerId: run.workerId });
  }
  return stale;
}
