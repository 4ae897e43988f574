import { slotHolder } from './job/state.ts';
import { countHeld, teamAccount, type MonthUsage } from './usage.ts';
import { runHolder } from './session/state.ts';
import { emptyHoldings, setJobLive, setSessionLive } from './holding.ts';
import { gangSize } from './job/gang.ts';
import {
  type ClusterState,
  type TrackedJob,
  type TrackedSession,
  type WorkerState,
} from './cluster.ts';

/** The shape of scheduler snapshots: one of another version is ignored, the log replayed. */
export const CLUSTER_SNAPSHOT_VERSION = 17;

/** The cluster state in plain JSON, for scheduler snapshots. */
export interface ClusterSnapshot {
  version: typeof CLUSTER_SNAPSHOT_VERSION;
  lastSeq: number;
  workers: (Omit<WorkerState, 'attempts' | 'reportedRunning'> & {
    attempts: string[];
    reportedRunning: string[];
  })[];
  jobs: TrackedJob[];
  sessions: TrackedSession[];
  quotas: [string, number][];
  hourQuotas: [string, number][];
  /** GPU time this month by account: it cannot be worked out from what is still running. */
  usage: [string, MonthUsage][];
}

export function snapshotCluster(cluster: ClusterState): ClusterSnapshot {
  return {
    version: CLUSTER_SNAPSHOT_VERSION,
    lastSeq: cluster.lastSeq,
    workers: [...cluster.workers.values()].map((w) => ({
      ...w,
      gpus: w.gpus.map((g) => ({ ...g })),
      attempts: [...w.attempts],
      reportedRunning: [...w.reportedRunning],
    })),
    jobs: [...cluster.jobs.values()],
    sessions: [...cluster.sessions.values()],
    quotas: [...cluster.quotas],
    hourQuotas: [...cluster.hourQuotas],
    usage: [...cluster.usage].map(([k, u]) => [k, { ...u }]),
  };
}

/** The cluster state a snapshot describes; fold the events after `lastSeq` onto it. */
export function restoreCluster(snapshot: ClusterSnapshot): ClusterState {
  const holding = emptyHoldings();
  for (const { state } of snapshot.jobs) setJobLive(holding, state.id, state, 0);
  for (const { state } of snapshot.sessions) setSessionLive(holding, state.id, state);
  return {
    lastSeq: snapshot.lastSeq,
    workers: new Map(
      snapshot.workers.map((w) => [
        w.id,
        {
          ...w,
          gpus: w.gpus.map((g) => ({ ...g })),
          attempts: new Set(w.attempts),
          reportedRunning: new Set(w.reportedRunning),
        },
      ]),
    ),
    jobs: new Map(snapshot.jobs.map((j) => [j.state.id, j])),
    sessions: new Map(snapshot.sessions.map((s) => [s.state.id, s])),
    quotas: new Map(snapshot.quotas),
    gpusHeld: gpusHeldBy(snapshot.jobs, snapshot.sessions),
    hourQuotas: new Map(snapshot.hourQuotas),
    usage: new Map(snapshot.usage.map(([k, u]) => [k, { ...u }])),
    holding,
    queue: null,
  };
}

/** The GPUs each user and team holds, between the live attempts of jobs and the runs of sessions. */
function gpusHeldBy(
  jobs: Iterable<TrackedJob>,
  sessions: Iterable<TrackedSession>,
): Map<string, number> {
  const held = new Map<string, number>();
  for (const { state } of jobs) {
    const attempt = slotHolder(state);
    if (attempt) countFor(held, state, attempt.gpus.length * gangSize(attempt));
  }
  for (const { state } of sessions) {
    const run = runHolder(state);
    if (run) countFor(held, state, run.gpus.length);
  }
  return held;
}

function countFor(
  held: Map<string, number>,
  of: { owner: string; team: string | null },
  gpus: number,
): void {
  countHeld(held, of.owner, gpus);
  if (of.team !== null) countHeld(held, teamAccount(of.team), gpus);
}
