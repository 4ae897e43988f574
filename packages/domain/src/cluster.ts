import type {
  AggregateHead,
  JobEvent,
  SessionEvent,
  StoredEvent,
  UserEvent,
  WorkerEvent,
} from '@trainyard/events';
import { evolveWorker, initialWorker, type WorkerLifecycle } from './worker.ts';
import {
  emptyHoldings,
  sessionMemoryNeed,
  setJobLive,
  setSessionLive,
  type Holdings,
} from './holding.ts';
import { gangSize, membersOf } from './job/gang.ts';
import { chargeAccount, hoursUsed, setQuota, teamAccount, type MonthUsage } from './usage.ts';
import { assertNever } from './errors.ts';
import {
  awaitsPlacement,
  evolveJob,
  initialJobState,
  isTerminal,
  slotHolder,
  type JobState,
} from './job/state.ts';
import { memoryNeed } from './job/needs.ts';
import {
  evolveSession,
  initialSessionState,
  runHolder,
  sessionAwaitsPlacement,
  sessionEnded,
  type SessionState,
} from './session/state.ts';

export interface GpuUsage {
  index: number;
  /** The model, as the worker's inventory names it. */
  name: string;
  vramBytes: number;
  reservedBytes: number;
  attempts: number;
  simulated: boolean;
}

export interface WorkerState {
  id: string;
  /** Where it stands in its lifecycle (`evolveWorker`): only an online worker gets work. */
  lifecycle: WorkerLifecycle;
  /** Where other workers reach it: a gang's members reach their rank 0 there. */
  address: string;
  gpus: GpuUsage[];
  cpuSlots: number;
  cpusUsed: number;
  /** The host's memory (null: not counted), and what its attempts need of it. */
  memoryBytes: number | null;
  memoryUsed: number;
  /** Whether it holds an attempt's `memoryGb` as a hard limit. */
  limitsMemory: boolean;
  /** How it runs attempts (`process`, `docker`, `simulated`): a job in a container needs `docker`. */
  runtime: string;
  /** The newest dispatch contract it reads: a probe needs version 2. */
  dispatchVersion: number;
  /** What holds its slots: live attempts of jobs, and live runs of sessions, by id. */
  attempts: Set<string>;
  /** Stream sequence of the worker's latest `WorkerRegistered`. */
  registeredSeq: number;
  /** The attempts it said it still ran when it registered. */
  reportedRunning: Set<string>;
}

export interface TrackedJob {
  state: JobState;
  head: AggregateHead;
  /** Stream sequence of the event that made the job placeable: orders jobs of equal priority. */
  queuedSeq: number;
  /** When that event happened (ms since the epoch): its priority ages from then. */
  queuedAtMs: number;
  /** Stream sequence of the `JobAssigned` of the current attempt (0 before the first). */
  attemptSeq: number;
}

export interface TrackedSession {
  state: SessionState;
  head: AggregateHead;
  /** Stream sequence of the event that made the session placeable: its request, or a requeue. */
  queuedSeq: number;
  /** When that event happened (ms since the epoch): its priority ages from then. */
  queuedAtMs: number;
  /** Stream sequence of the `SessionAssigned` of the current run (0 before the first). */
  runSeq: number;
}

/** What the scheduler knows: live workers, every job and every session that has not ended. */
export interface ClusterState {
  workers: Map<string, WorkerState>;
  jobs: Map<string, TrackedJob>;
  sessions: Map<string, TrackedSession>;
  /**
   * The most GPUs each user with a quota may hold at once (`UserQuotaSet`), and each team with
   * one (`TeamQuotaSet`, under `teamAccount`).
   */
  quotas: Map<string, number>;
  /**
   * The GPUs each user's live attempts and session runs hold, and each team's (under
   * `teamAccount`), kept as they are booked.
   */
  gpusHeld: Map<string, number>;
  /** The GPU-hours each user and team (under `teamAccount`) may take a calendar month. */
  hourQuotas: Map<string, number>;
  /** The GPU time each user's and team's work took this month, as of its last change. */
  usage: Map<string, MonthUsage>;
  /** What holds workers now, by job and by session: live attempts and runs. */
  holding: Holdings;
  /** What keeps the placement queue, once a round has first read this state (`waiting.ts`). */
  queue: QueueKeeper | null;
  lastSeq: number;
}

/**
 * What keeps the placement queue: told of each change the fold makes to a job or session that
 * waited for a place before it, or waits after it (null: it ended).
 */
export interface QueueKeeper {
  job(id: string, job: TrackedJob | null): void;
  session(id: string, session: TrackedSession | null): void;
}

export const emptyCluster = (): ClusterState => ({
  workers: new Map(),
  jobs: new Map(),
  sessions: new Map(),
  quotas: new Map(),
  gpusHeld: new Map(),
  hourQuotas: new Map(),
  usage: new Map(),
  holding: emptyHoldings(),
  queue: null,
  lastSeq: 0,
});

/** A copy to book places on: its GPUs and counters are its own; what it runs is not copied. */
export function cloneWorker(w: WorkerState): WorkerState {
  return { ...w, gpus: w.gpus.map((g) => ({ ...g })) };
}

/** What an attempt or a session's run holds of a worker. */
interface Holding {
  id: string;
  workerId: string;
  gpus: number[];
  vramBytes: number;
  cpus: number;
  memoryBytes: number;
}

/** What a job's last attempt holds: on one worker, or a gang's on each of its members'. */
function jobHoldings(job: JobState): Holding[] {
  const attempt = job.attempts[job.attempts.length - 1];
  if (!attempt) return [];
  const memoryBytes = memoryNeed(job);
  return membersOf(attempt).map((m) => ({ ...m, memoryBytes }));
}

function sessionHolding(session: SessionState): Holding[] {
  const run = session.runs[session.runs.length - 1];
  return run ? [{ ...run, memoryBytes: sessionMemoryNeed(session) }] : [];
}

/**
 * Books (or frees) what an attempt or run of `of` holds: on its worker, and in its owner's count
 * and its team's.
 */
function hold(
  cluster: ClusterState,
  of: { owner: string; team: string | null },
  holdings: Holding[],
  sign: 1 | -1,
  atMs: number,
): void {
  if (holdings.length === 0) return;
  let gpus = 0;
  for (const holding of holdings) gpus += sign * holding.gpus.length;
  chargeAccount(cluster.gpusHeld, cluster.usage, of.owner, gpus, atMs);
  if (of.team !== null)
    chargeAccount(cluster.gpusHeld, cluster.usage, teamAccount(of.team), gpus, atMs);
  for (const holding of holdings) reserve(cluster, holding, sign);
}

/** The GPU-hours an account's work has taken this month, as of `nowMs`, running work counted. */
export function gpuHoursUsed(cluster: ClusterState, name: string, nowMs: number): number {
  return hoursUsed(cluster.gpusHeld, cluster.usage, name, nowMs);
}

function reserve(cluster: ClusterState, holding: Holding, sign: 1 | -1): void {
  const worker = cluster.workers.get(holding.workerId);
  if (!worker) return;
  for (const index of holding.gpus) {
    const gpu = worker.gpus.find((g) => g.index === index);
    if (!gpu) continue;
    gpu.reservedBytes += sign * holding.vramBytes;
    gpu.attempts += sign;
  }
  worker.cpusUsed += sign * holding.cpus;
  worker.memoryUsed += sign * holding.memoryBytes;
  if (sign === 1) worker.attempts.add(holding.id);
  else worker.attempts.delete(holding.id);
}

function evolveJobInCluster(cluster: ClusterState, event: StoredEvent<JobEvent>): void {
  const tracked = cluster.jobs.get(event.aggregateId);
  const before = tracked?.state ?? initialJobState(event.aggregateId);
  const after = evolveJob(before, event, event.occurredAt);
  const held = slotHolder(before);
  const holds = slotHolder(after);
  const atMs = Date.parse(event.occurredAt);
  if (held && held.id !== holds?.id) hold(cluster, before, jobHoldings(before), -1, atMs);
  if (holds && holds.id !== held?.id) hold(cluster, after, jobHoldings(after), 1, atMs);
  setJobLive(cluster.holding, event.aggregateId, after, held ? gangSize(held) : 1);
  const awaited = awaitsPlacement(before);
  if (isTerminal(after.status)) {
    cluster.jobs.delete(event.aggregateId);
    if (awaited) cluster.queue?.job(event.aggregateId, null);
    return;
  }
  const awaits = awaitsPlacement(after);
  // A job its probe measured keeps the place it had in the queue when it was submitted.
  const becameQueued =
    awaits && (!awaited || after.status !== before.status) && event.type !== 'JobEstimated';
  const job: TrackedJob = {
    state: after,
    head: { seq: event.seq, hash: event.hash },
    queuedSeq: becameQueued ? event.seq : (tracked?.queuedSeq ?? event.seq),
    queuedAtMs: becameQueued
      ? Date.parse(event.occurredAt)
      : (tracked?.queuedAtMs ?? Date.parse(event.occurredAt)),
    attemptSeq: event.type === 'JobAssigned' ? event.seq : (tracked?.attemptSeq ?? 0),
  };
  cluster.jobs.set(event.aggregateId, job);
  if (awaited || awaits) cluster.queue?.job(event.aggregateId, job);
}

function evolveSessionInCluster(cluster: ClusterState, event: StoredEvent<SessionEvent>): void {
  const tracked = cluster.sessions.get(event.aggregateId);
  const before = tracked?.state ?? initialSessionState(event.aggregateId);
  const after = evolveSession(before, event, event.occurredAt);
  const held = runHolder(before);
  const holds = runHolder(after);
  const atMs = Date.parse(event.occurredAt);
  if (held && held.id !== holds?.id) hold(cluster, before, sessionHolding(before), -1, atMs);
  if (holds && holds.id !== held?.id) hold(cluster, after, sessionHolding(after), 1, atMs);
  setSessionLive(cluster.holding, event.aggregateId, after);
  const awaited = sessionAwaitsPlacement(before);
  if (sessionEnded(after.status)) {
    cluster.sessions.delete(event.aggregateId);
    if (awaited) cluster.queue?.session(event.aggregateId, null);
    return;
  }
  const awaits = sessionAwaitsPlacement(after);
  const becameQueued = awaits && !awaited;
  const session: TrackedSession = {
    state: after,
    head: { seq: event.seq, hash: event.hash },
    queuedSeq: becameQueued ? event.seq : (tracked?.queuedSeq ?? event.seq),
    queuedAtMs: becameQueued
      ? Date.parse(event.occurredAt)
      : (tracked?.queuedAtMs ?? Date.parse(event.occurredAt)),
    runSeq: event.type === 'SessionAssigned' ? event.seq : (tracked?.runSeq ?? 0),
  };
  cluster.sessions.set(event.aggregateId, session);
  if (awaited || awaits) cluster.queue?.session(event.aggregateId, session);
}

/** A host name as a worker's address may be one: what other workers are told to reach. */
const HOST_NAME = /^[A-Za-z0-9][A-Za-z0-9.:-]{0,254}$/;

/** What placement reads of a worker beyond its GPUs and CPU slots, as its registration says. */
export interface WorkerCapacity {
  memoryBytes: number | null;
  limitsMemory: boolean;
  dispatchVersion: number;
}

/** A registration's capacity, read by the rules of its time for fields it predates. */
export function registeredCapacity(
  data: Extract<WorkerEvent, { type: 'WorkerRegistered' }>['data'],
): WorkerCapacity {
  return {
    memoryBytes: data.memoryBytes ?? null,
    limitsMemory: data.limitsMemory ?? data.runtime === 'docker',
    dispatchVersion: data.dispatchVersion ?? 1,
  };
}

function evolveWorkerInCluster(cluster: ClusterState, ev: StoredEvent<WorkerEvent>): void {
  switch (ev.type) {
    case 'WorkerRegistered': {
      const existing = cluster.workers.get(ev.aggregateId);
      const worker: WorkerState = {
        id: ev.aggregateId,
        lifecycle: evolveWorker(existing?.lifecycle ?? initialWorker, ev),
        address:
          ev.data.address ?? (HOST_NAME.test(ev.data.hostname) ? ev.data.hostname : ev.aggregateId),
        gpus: ev.data.gpus.map((g) => ({
          index: g.index,
          name: g.name,
          vramBytes: g.vramBytes,
          reservedBytes: 0,
          attempts: 0,
          simulated: g.simulated,
        })),
        cpuSlots: ev.data.cpuSlots,
        cpusUsed: 0,
        ...registeredCapacity(ev.data),
        memoryUsed: 0,
        runtime: ev.data.runtime,
        attempts: new Set(),
        registeredSeq: ev.seq,
        reportedRunning: new Set(ev.data.runningAttempts),
      };
      cluster.workers.set(ev.aggregateId, worker);
      if (existing) {
        for (const job of cluster.jobs.values()) {
          if (!slotHolder(job.state)) continue;
          for (const h of jobHoldings(job.state))
            if (h.workerId === ev.aggregateId) reserve(cluster, h, 1);
        }
        for (const session of cluster.sessions.values()) {
          if (!runHolder(session.state)) continue;
          for (const h of sessionHolding(session.state))
            if (h.workerId === ev.aggregateId) reserve(cluster, h, 1);
        }
      }
      return;
    }
    case 'WorkerLeft':
    case 'WorkerLost': {
      const worker = cluster.workers.get(ev.aggregateId);
      if (worker) worker.lifecycle = evolveWorker(worker.lifecycle, ev);
      return;
    }
    default:
      return assertNever(ev);
  }
}

/** Folds one event of the log into the cluster state, in place (the scheduler's hot path). */
export function evolveCluster(cluster: ClusterState, event: StoredEvent): void {
  cluster.lastSeq = event.seq;
  switch (event.aggregate) {
    case 'job':
      return evolveJobInCluster(cluster, event as StoredEvent<JobEvent>);
    case 'worker':
      return evolveWorkerInCluster(cluster, event as StoredEvent<WorkerEvent>);
    case 'session':
      return evolveSessionInCluster(cluster, event as StoredEvent<SessionEvent>);
    case 'user':
      return evolveUserInCluster(cluster, event as StoredEvent<UserEvent>);
    case 'team':
      if (event.type === 'TeamQuotaSet')
        return setQuota(cluster.quotas, teamAccount(event.aggregateId), event.data.maxGpus);
      if (event.type === 'TeamGpuHoursQuotaSet')
        return setQuota(cluster.hourQuotas, teamAccount(event.aggregateId), event.data.maxGpuHours);
      return;
    default:
      return assertNever(event.aggregate);
  }
}

function evolveUserInCluster(cluster: ClusterState, event: StoredEvent<UserEvent>): void {
  if (event.type === 'UserQuotaSet')
    setQuota(cluster.quotas, event.aggregateId, event.data.maxGpus);
  else if (event.type === 'UserGpuHoursQuotaSet')
    setQuota(cluster.hourQuotas, event.aggregateId, event.data.maxGpuHours);
}
