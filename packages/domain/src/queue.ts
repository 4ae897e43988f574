import type { Holder, PendingReason, Resources, TeamHolding } from '@trainyard/events';
import { gpuHoursUsed, type ClusterState, type TrackedJob, type WorkerState } from './cluster.ts';
import { needCandidate, type Candidate, type Need } from './candidates.ts';
import { listQueue } from './placement-queue.ts';
import { waitingInOrder } from './waiting.ts';
import {
  awaitsDependencies,
  awaitsPlacement,
  isTerminal,
  slotHolder,
  type JobState,
} from './job/state.ts';
import { runsInContainer } from './job/needs.ts';
import { couldEverHold, fitOnWorker, type WorkerShape } from './fit.ts';
import { membersOf } from './job/gang.ts';
import { onlineWorkers, placeInOrder } from './placement.ts';
import { overQuota, quotaBook, type OverQuota } from './quota.ts';
import { TEAM_PREFIX, teamAccount } from './usage.ts';
import { DEFAULT_POLICY, effectivePriority, type PlacementPolicy } from './policy.ts';
import { runHolder } from './session/state.ts';
import { Backfill, type Reservation } from './backfill.ts';

/**
 * One entry of the queue as worked out: where it stands and why. It is put in words
 * (`describePending`) only for the entries a caller asks for.
 */
export interface Pending {
  kind: Candidate['kind'];
  id: string;
  owner: string;
  team: string | null;
  status: string;
  /** Its place among what may be placed now, from 1; null for what waits for something else. */
  position: number | null;
  priority: number;
  effectivePriority: number;
  resources: Resources;
  /** How many workers it spans at once (a gang job's `nodes`), `resources` on each. */
  nodes: number;
  /** For `gangIncomplete`: how many online workers could take one of its members now. */
  freeNodes: number;
  container: boolean;
  reason: PendingReason;
  /** Entries ahead of it that wait for the same room. */
  ahead: number;
  sinceMs: number;
  retryAt: string | null;
  dependsOn: readonly string[];
  /** For `overQuota`: the GPUs its owner's (or team's) work held, and the quota. */
  quota: OverQuota | null;
  /** For `held`: who holds it, and why. */
  hold: JobState['held'];
  /** For the entry a place is reserved for, and for `reserved`: that reservation. */
  reservation: Reservation | null;
}

/** The queue in placement order, and who holds what. */
export interface QueueView {
  /** What may be placed now, in placement order, then what waits for something else. */
  entries: Pending[];
  /** How many entries have a position: what may be placed now. */
  positioned: number;
  /** What each user's running work holds, most GPUs first, with their quota. */
  holders: Holder[];
  /** The quotas of each user and team with one or with work, and what it took this month. */
  accounts: ReadonlyMap<string, AccountQuota>;
  /** What each team with a quota, or holding some, holds. */
  teams: TeamHolding[];
}

/** An account's quotas, and the GPU-hours its work took this month, as the view was made. */
export interface AccountQuota {
  maxGpus: number | null;
  gpuHours: number;
  maxGpuHours: number | null;
}

const NO_QUOTA: AccountQuota = { maxGpus: null, gpuHours: 0, maxGpuHours: null };

/** What one user's running work holds, and their quota: nothing held when they hold nothing. */
export function holderOf(view: QueueView, owner: string): Holder {
  return (
    view.holders.find((h) => h.owner === owner) ?? {
      owner,
      gpus: 0,
      cpus: 0,
      jobs: 0,
      sessions: 0,
      ...(view.accounts.get(owner) ?? NO_QUOTA),
    }
  );
}

/** What one team's work holds, and its quotas: nothing held when it holds nothing. */
export function teamHoldingOf(view: QueueView, team: string): TeamHolding {
  return (
    view.teams.find((t) => t.team === team) ?? {
      team,
      gpus: 0,
      ...(view.accounts.get(teamAccount(team)) ?? NO_QUOTA),
    }
  );
}

/**
 * Where everything that waits stands, and why: the placement order of the next round (what it
 * would place, `placing`), then, for the rest, whether its owner's GPU quota holds it back once
 * the round has placed what it would (`overQuota`), whether any online worker could ever hold it
 * (`unsatisfiable`), whether only the place reserved for the first entry that waits for room
 * keeps it out (`reserved`), and whether earlier entries wait for the same room (`priority`) or
 * it is first in line (`resources`, with when it is expected to start where a place is reserved
 * for it): work of another shape ahead of it holds it back only through that one reservation. Jobs that wait for something other than room follow: held jobs, retries in their
 * backoff, jobs waiting on dependencies, jobs being built. Pure.
 */
export function explainQueue(
  cluster: ClusterState,
  now: Date,
  policy: PlacementPolicy = DEFAULT_POLICY,
): QueueView {
  const { ready } = waitingInOrder(cluster, now, policy);
  const online = onlineWorkers(cluster);
  const quota = quotaBook(cluster, now);
  const backfill = new Backfill(cluster, now.getTime(), policy, true);
  const afterRound = onlineWorkers(cluster);
  const placing = placeInOrder(listQueue(ready), afterRound, policy, quota, backfill);
  const placed = new Set(placing.map((a) => a.id));
  const { reservation, keptOut } = backfill;
  const kinds = distinctWhenEmpty(online);
  const holdable = new Map<string, boolean>();
  const waitingByShape = new Map<string, number>();
  /** For gangs: how many workers could take one of a shape's members after the round. */
  const freeByShape = new Map<string, number>();
  const entries: Pending[] = ready.map((c, i) => {
    let reason: PendingReason;
    let ahead = 0;
    let over: Pending['quota'] = null;
    let freeNodes = 0;
    if (placed.has(c.id)) reason = 'placing';
    else if (online.length === 0) reason = 'noWorkers';
    else if (keptOut.has(c.id)) reason = 'reserved';
    else {
      const shape = c.shape;
      let canHold = holdable.get(shape);
      if (canHold === undefined) {
        canHold =
          c.nodes === 1
            ? kinds.some((w) => couldEverHold(c, w, policy))
            : workersThatCouldHold(c, online, policy) >= c.nodes;
        holdable.set(shape, canHold);
      }
      over = canHold ? overQuota(c, quota) : null;
      ahead = waitingByShape.get(shape) ?? 0;
      if (canHold && !over) waitingByShape.set(shape, ahead + 1);
      if (!canHold) reason = 'unsatisfiable';
      else if (over) reason = 'overQuota';
      else if (c.nodes > 1) {
        reason = 'gangIncomplete';
        freeNodes = freeByShape.get(shape) ?? -1;
        if (freeNodes < 0) {
          freeNodes = afterRound.filter((w) => fitOnWorker(c, w, policy) !== null).length;
          freeByShape.set(shape, freeNodes);
        }
      } else reason = ahead > 0 ? 'priority' : 'resources';
    }
    const tracked = c.tracked!;
    const job = c.kind === 'job' ? (tracked as TrackedJob) : undefined;
    return {
      kind: c.kind,
      id: c.id,
      owner: tracked.state.owner,
      team: tracked.state.team,
      status: tracked.state.status,
      position: i + 1,
      priority: job?.state.spec?.priority ?? 0,
      effectivePriority: c.priority,
      resources: c.resources,
      nodes: c.nodes,
      freeNodes,
      container: c.container,
      reason,
      ahead,
      sinceMs: tracked.queuedAtMs,
      retryAt: job?.state.retryAt ?? null,
      dependsOn: NONE,
      quota: over,
      hold: null,
      reservation: reason === 'reserved' || c.id === reservation?.id ? reservation : null,
    };
  });
  const retriesListed = new Set(
    ready.filter((c) => c.tracked?.state.status === 'retrying').map((c) => c.id),
  );
  const holding = new Holders();
  for (const job of cluster.jobs.values()) {
    const { state } = job;
    // What may be placed now is listed already: all that waits for a place but a retry not due.
    if (awaitsPlacement(state) && (state.status !== 'retrying' || retriesListed.has(state.id)))
      continue;
    const attempt = slotHolder(state);
    if (attempt) {
      const members = membersOf(attempt);
      const gpus = members.flatMap((m) => m.gpus);
      holding.add(state.owner, { gpus, cpus: members.reduce((n, m) => n + m.cpus, 0) }, 'jobs');
      continue;
    }
    if (!state.spec) continue;
    let reason: PendingReason;
    if (state.held && !isTerminal(state.status)) reason = 'held';
    else if (awaitsDependencies(state)) reason = 'dependency';
    else if (state.status === 'retrying') reason = 'retryBackoff';
    else if (state.status === 'submitted' || state.status === 'building') reason = 'building';
    else continue;
    entries.push({
      kind: 'job',
      id: state.id,
      owner: state.owner,
      team: state.team,
      status: state.status,
      position: null,
      priority: state.spec.priority,
      effectivePriority: effectivePriority(state.spec.priority, job.queuedAtMs, now, policy),
      resources: state.spec.resources,
      nodes: state.spec.nodes ?? 1,
      freeNodes: 0,
      container: runsInContainer(state.spec),
      reason,
      ahead: 0,
      sinceMs: state.submittedAt ? Date.parse(state.submittedAt) : job.queuedAtMs,
      retryAt: state.retryAt,
      dependsOn: state.spec.dependsOn ?? NONE,
      quota: null,
      hold: state.held,
      reservation: null,
    });
  }
  for (const { state } of cluster.sessions.values()) {
    const run = runHolder(state);
    if (run) holding.add(state.owner, run, 'sessions');
  }
  const accounts = accountQuotas(cluster, now);
  return {
    entries,
    positioned: ready.length,
    holders: holding.list(accounts),
    accounts,
    teams: [...accounts]
      .filter(
        ([name, q]) => name.startsWith(TEAM_PREFIX) && (inUse(q) || cluster.gpusHeld.has(name)),
      )
      .map(([name, quota]) => ({
        team: name.slice(TEAM_PREFIX.length),
        gpus: cluster.gpusHeld.get(name) ?? 0,
        ...quota,
      }))
      .sort((a, b) => (a.team < b.team ? -1 : 1)),
  };
}

/** Whether an account has a quota, or took GPU time this month. */
const inUse = (q: AccountQuota) => q.maxGpus !== null || q.maxGpuHours !== null || q.gpuHours > 0;

/** The quotas and this month's GPU-hours of each account with a quota or some use. */
function accountQuotas(cluster: ClusterState, now: Date): Map<string, AccountQuota> {
  const accounts = new Map<string, AccountQuota>();
  for (const name of [
    ...cluster.quotas.keys(),
    ...cluster.hourQuotas.keys(),
    ...cluster.usage.keys(),
  ]) {
    if (accounts.has(name)) continue;
    accounts.set(name, {
      maxGpus: cluster.quotas.get(name) ?? null,
      gpuHours: Math.round(gpuHoursUsed(cluster, name, now.getTime()) * 10_000) / 10_000,
      maxGpuHours: cluster.hourQuotas.get(name) ?? null,
    });
  }
  return accounts;
}

const NONE: readonly string[] = [];

/** What each owner's running jobs and sessions hold. */
class Holders {
  readonly #by = new Map<string, Holder>();

  add(owner: string, held: { gpus: number[]; cpus: number }, kind: 'jobs' | 'sessions'): void {
    let h = this.#by.get(owner);
    if (!h) this.#by.set(owner, (h = { owner, gpus: 0, cpus: 0, jobs: 0, sessions: 0 }));
    h.gpus += held.gpus.length;
    h.cpus += held.cpus;
    h[kind] += 1;
  }

  /** Most GPUs first, each with its quotas. */
  list(accounts: ReadonlyMap<string, AccountQuota>): Holder[] {
    for (const h of this.#by.values()) Object.assign(h, accounts.get(h.owner) ?? NO_QUOTA);
    return [...this.#by.values()].sort(
      (a, b) => b.gpus - a.gpus || b.cpus - a.cpus || (a.owner < b.owner ? -1 : 1),
    );
  }
}

/** One worker of each kind there is, as placement reads them when empty: a fleet has few. */
function distinctWhenEmpty(workers: WorkerState[]): WorkerState[] {
  const kinds = new Map<string, WorkerState>();
  for (const w of workers) {
    const key = JSON.stringify([
      w.runtime,
      w.cpuSlots,
      w.memoryBytes,
      w.limitsMemory,
      w.dispatchVersion,
      w.gpus.map((g) => [g.name, g.vramBytes]),
    ]);
    if (!kinds.has(key)) kinds.set(key, w);
  }
  return [...kinds.values()];
}

/**
 * Whether no worker of `workers` could ever hold a job or session of this need, even with
 * nothing else on it (for a gang job, fewer workers than its `nodes` could); false when there
 * are no workers to judge by.
 */
export function noWorkerCouldHold(
  need: Need,
  workers: WorkerShape[],
  policy: PlacementPolicy = DEFAULT_POLICY,
): boolean {
  if (workers.length === 0) return false;
  const candidate = needCandidate(need);
  return workersThatCouldHold(candidate, workers, policy) < need.nodes;
}

/** How many of `workers` could hold the candidate, each with nothing else on it (up to its `nodes`). */
function workersThatCouldHold(
  c: Candidate,
  workers: readonly WorkerShape[],
  policy: PlacementPolicy,
): number {
  let count = 0;
  for (const w of workers) {
    if (couldEverHold(c, w, policy) && ++count >= c.nodes) break;
  }
  return count;
}
