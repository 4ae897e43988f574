import { slotHolder, type JobState } from './job/state.ts';
import { limitBytes, memoryNeed } from './job/needs.ts';
import { membersOf } from './job/gang.ts';
import { runHolder, type SessionState } from './session/state.ts';
import type { WorkerState } from './cluster.ts';
import type { Candidate } from './candidates.ts';

/** The host memory a session's run needs: the limit it asked for, else nothing counted. */
export function sessionMemoryNeed(state: SessionState): number {
  return state.spec ? limitBytes(state.spec.resources) : 0;
}

/** What a live attempt or session run holds of a worker, and how long it may run. */
export interface LiveHolding {
  /** The attempt, or the session's run, that holds it. */
  attemptId: string;
  workerId: string;
  gpus: readonly number[];
  vramBytes: number;
  cpus: number;
  memoryBytes: number;
  /** When it started (ms since the epoch); null while it has yet to. */
  startedMs: number | null;
  /**
   * How long it may run from its start: a job's time limit, a session's maximum life, 0 once it
   * is being stopped; null where nothing bounds it. A probe runs for the policy's `probeMs`.
   */
  runMs: number | null;
  probe: boolean;
  /** Its own priority (a session's is 0), and whether work of a higher one may stop it. */
  priority: number;
  preemptible: boolean;
  /** It is being stopped (cancelled, past its time limit, preempted): it frees its place soon. */
  stopping: boolean;
}

/**
 * What a job's live attempt holds on each of its workers, by key: the job's id for it (or a
 * gang's rank 0), `<id>#<rank>` for a gang's other members. Empty when it holds nothing.
 */
export function jobLives(state: JobState): [string, LiveHolding][] {
  const attempt = slotHolder(state);
  if (!attempt) return [];
  const limit = state.spec?.timeLimit;
  const stopping = state.timeLimitReached || state.cancelRequested || state.preemptRequested;
  const members = membersOf(attempt);
  const common = {
    attemptId: attempt.id,
    memoryBytes: memoryNeed(state),
    startedMs: attempt.startedAt === null ? null : Date.parse(attempt.startedAt),
    runMs: stopping ? 0 : limit === undefined ? null : limit * 1000,
    probe: attempt.probe && !stopping,
    priority: state.spec?.priority ?? 0,
    // Preemption stops a job on one worker; a gang is never stopped so (`decidePreempt`).
    preemptible: state.spec?.preemptible === true && !attempt.probe && members.length === 1,
    stopping,
  };
  return members.map((m) => [
    m.rank === 0 ? state.id : `${state.id}#${m.rank}`,
    { ...common, workerId: m.workerId, gpus: m.gpus, vramBytes: m.vramBytes, cpus: m.cpus },
  ]);
}

/** What holds workers now, by key: live attempts of jobs (`jobLives`), live runs of sessions. */
export interface Holdings {
  jobs: Map<string, LiveHolding>;
  sessions: Map<string, LiveHolding>;
  /**
   * The jobs' holdings that preemption weighs (`weighs`), by worker, each by its key: kept
   * apart, as they are few among many.
   */
  weighed: Map<string, Map<string, LiveHolding>>;
  /**
   * Those something bounds (`bounded`), by worker, each with its key: what backfill counts on to
   * end, read a worker at a time.
   */
  ending: Map<string, Map<LiveHolding, string>>;
  /** How many holdings nothing bounds each worker has, where it has any. */
  unbounded: Map<string, number>;
}

export const emptyHoldings = (): Holdings => ({
  jobs: new Map(),
  sessions: new Map(),
  weighed: new Map(),
  ending: new Map(),
  unbounded: new Map(),
});

/** Whether preemption weighs a job's holding: it may be stopped, or it is being stopped. */
export const weighs = (h: LiveHolding): boolean => h.preemptible || h.stopping;

/** Whether it is expected to end: a time limit, a maximum life or a probe's timeout bounds it. */
export const bounded = (h: LiveHolding): boolean => h.probe || h.runMs !== null;

function put(holdings: Holdings, of: 'jobs' | 'sessions', key: string, live: LiveHolding): void {
  holdings[of].set(key, live);
  if (of === 'jobs' && weighs(live)) {
    const on = holdings.weighed.get(live.workerId);
    if (on) on.set(key, live);
    else holdings.weighed.set(live.workerId, new Map([[key, live]]));
  }
  if (!bounded(live)) {
    const { unbounded } = holdings;
    unbounded.set(live.workerId, (unbounded.get(live.workerId) ?? 0) + 1);
    return;
  }
  let on = holdings.ending.get(live.workerId);
  if (!on) holdings.ending.set(live.workerId, (on = new Map()));
  on.set(live, key);
}

function drop(holdings: Holdings, of: 'jobs' | 'sessions', key: string): void {
  const old = holdings[of].get(key);
  if (!old) return;
  holdings[of].delete(key);
  const weighed = of === 'jobs' ? holdings.weighed.get(old.workerId) : undefined;
  if (weighed?.delete(key) && weighed.size === 0) holdings.weighed.delete(old.workerId);
  if (!bounded(old)) {
    const left = holdings.unbounded.get(old.workerId)! - 1;
    if (left > 0) holdings.unbounded.set(old.workerId, left);
    else holdings.unbounded.delete(old.workerId);
    return;
  }
  const on = holdings.ending.get(old.workerId);
  if (!on?.delete(old) || on.size > 0) return;
  holdings.ending.delete(old.workerId);
}

/**
 * Records what job `id` holds now (`jobLives` of its state), in place of what it held before on
 * `nodesBefore` workers.
 */
export function setJobLive(
  holdings: Holdings,
  id: string,
  state: JobState,
  nodesBefore: number,
): void {
  drop(holdings, 'jobs', id);
  for (let rank = 1; rank < nodesBefore; rank++) drop(holdings, 'jobs', `${id}#${rank}`);
  for (const [key, live] of jobLives(state)) put(holdings, 'jobs', key, live);
}

/** Records what session `id` holds now, or that it holds nothing. */
export function setSessionLive(holdings: Holdings, id: string, state: SessionState): void {
  drop(holdings, 'sessions', id);
  const live = sessionLive(state);
  if (live) put(holdings, 'sessions', id, live);
}

/** What a session's live run holds, if it has one. */
export function sessionLive(state: SessionState): LiveHolding | undefined {
  const run = runHolder(state);
  if (!run) return undefined;
  return {
    attemptId: run.id,
    workerId: run.workerId,
    gpus: run.gpus,
    vramBytes: run.vramBytes,
    cpus: run.cpus,
    memoryBytes: sessionMemoryNeed(state),
    startedMs: run.startedAt === null ? null : Date.parse(run.startedAt),
    runMs: state.status === 'stopping' ? 0 : state.timers ? state.timers.maxMin * 60_000 : null,
    probe: false,
    priority: 0,
    preemptible: false,
    stopping: state.status === 'stopping',
  };
}

/** Gives back on `worker` (a copy) what a release, or a live holding, holds. */
export function free(
  worker: WorkerState,
  r: Pick<LiveHolding, 'gpus' | 'vramBytes' | 'cpus' | 'memoryBytes'>,
): void {
  for (const index of r.gpus) {
    const gpu = worker.gpus.find((g) => g.index === index);
    if (!gpu) continue;
    gpu.reservedBytes -= r.vramBytes;
    gpu.attempts -= 1;
  }
  worker.cpusUsed -= r.cpus;
  worker.memoryUsed -= r.memoryBytes;
}

/** Where a candidate would go on a worker as it stands, if it fits: its GPUs. */
export type Fit = (c: Candidate, worker: WorkerState) => { gpus: number[] } | null;
