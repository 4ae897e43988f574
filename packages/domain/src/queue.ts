import type { Holder, JobSpec, PendingReason, QueueEntry, Resources } from '@trainyard/events';
import type { ClusterState, WorkerState } from './cluster.ts';
import { awaitsDependencies, needsEstimate, runsInContainer, slotHolder } from './job/state.ts';
import {
  byPlacementOrder,
  couldEverHold,
  DEFAULT_POLICY,
  effectivePriority,
  onlineWorkers,
  placeable,
  placeInOrder,
  shapeOf,
  type Candidate,
  type PlacementPolicy,
} from './placement.ts';
import { runHolder } from './session/state.ts';

/** The queue in placement order, and who holds what. */
export interface QueueView {
  /** What may be placed now, in placement order, then what waits for something else. */
  entries: QueueEntry[];
  holders: Holder[];
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** What a job or session asks of a worker, in words. */
export function describeNeed(resources: Resources, container: boolean): string {
  const { gpus, vramGb, cpus, gpuModel, memoryGb } = resources;
  const parts = [
    gpus === 0
      ? plural(cpus ?? 1, 'CPU slot')
      : `${plural(gpus, `${gpuModel ? `${gpuModel} ` : ''}GPU`)}${vramGb === undefined ? ' (whole)' : ` with ${vramGb} GiB free`}`,
    ...(memoryGb === undefined ? [] : [`${memoryGb} GiB of memory`]),
  ];
  return `${parts.join(' and ')}${container ? ', in a container' : ''}`;
}

function why(reason: PendingReason, need: string, ahead: number): string {
  switch (reason) {
    case 'placing':
      return 'it fits now: the scheduler places it in its next round';
    case 'resources':
      return `waiting for room: it needs ${need}, which no online worker has free now`;
    case 'priority':
      return `waiting for room behind ${plural(ahead, 'earlier entry', 'earlier entries')} of the queue that need the same (${need})`;
    case 'unsatisfiable':
      return `no online worker could ever hold it: it needs ${need}`;
    case 'noWorkers':
      return 'no worker is online';
    default:
      return reason;
  }
}

/**
 * Where everything that waits stands, and why: the placement order of the next round (what it
 * would place, `placing`), then, for the rest, whether any online worker could ever hold it
 * (`unsatisfiable`), and whether earlier entries wait for the same room (`priority`) or it is
 * first in line (`resources`). Jobs that wait for something other than room follow: retries in
 * their backoff, jobs waiting on dependencies, jobs being built. Pure.
 */
export function explainQueue(
  cluster: ClusterState,
  now: Date,
  policy: PlacementPolicy = DEFAULT_POLICY,
): QueueView {
  const ready = placeable(cluster, now, policy).ready.sort(byPlacementOrder);
  const online = onlineWorkers(cluster);
  const placed = new Set(placeInOrder(ready, onlineWorkers(cluster), policy).map((a) => a.id));
  const holdable = new Map<string, boolean>();
  const waitingByShape = new Map<string, number>();
  const entries: QueueEntry[] = ready.map((c, i) => {
    let reason: PendingReason;
    let ahead = 0;
    if (placed.has(c.id)) reason = 'placing';
    else if (online.length === 0) reason = 'noWorkers';
    else {
      const shape = shapeOf(c);
      let canHold = holdable.get(shape);
      if (canHold === undefined) {
        canHold = online.some((w) => couldEverHold(c, w, policy));
        holdable.set(shape, canHold);
      }
      ahead = waitingByShape.get(shape) ?? 0;
      if (canHold) waitingByShape.set(shape, ahead + 1);
      reason = !canHold ? 'unsatisfiable' : ahead > 0 ? 'priority' : 'resources';
    }
    return entryOf(
      cluster,
      c,
      i + 1,
      reason,
      why(reason, describeNeed(c.resources, c.container), ahead),
    );
  });
  const listed = new Set(ready.map((c) => c.id));
  for (const job of cluster.jobs.values()) {
    const { state } = job;
    if (listed.has(state.id) || !state.spec || slotHolder(state)) continue;
    let reason: PendingReason;
    let message: string;
    if (awaitsDependencies(state)) {
      reason = 'dependency';
      message = `waiting for ${state.spec.dependsOn!.join(', ')} to succeed`;
    } else if (state.status === 'retrying') {
      reason = 'retryBackoff';
      message = `retrying after a platform failure, at ${state.retryAt}`;
    } else if (state.status === 'submitted' || state.status === 'building') {
      reason = 'building';
      message = state.status === 'building' ? 'its image is being built' : 'waiting for a builder';
    } else continue;
    entries.push({
      kind: 'job',
      id: state.id,
      owner: state.owner,
      status: state.status,
      position: null,
      priority: state.spec.priority,
      effectivePriority: effectivePriority(state.spec.priority, job.queuedAt, now, policy),
      resources: state.spec.resources,
      reason,
      message,
      since: state.submittedAt ?? job.queuedAt,
      retryAt: state.retryAt,
    });
  }
  return { entries, holders: holders(cluster) };
}

function entryOf(
  cluster: ClusterState,
  c: Candidate,
  position: number,
  reason: PendingReason,
  message: string,
): QueueEntry {
  const job = c.kind === 'job' ? cluster.jobs.get(c.id) : undefined;
  const session = c.kind === 'session' ? cluster.sessions.get(c.id) : undefined;
  const state = job?.state ?? session!.state;
  return {
    kind: c.kind,
    id: c.id,
    owner: state.owner,
    status: state.status,
    position,
    priority: job?.state.spec?.priority ?? 0,
    effectivePriority: c.priority,
    resources: c.resources,
    reason,
    message,
    since: (job ?? session)!.queuedAt,
    retryAt: job?.state.retryAt ?? null,
  };
}

/** What each owner's running jobs and sessions hold, most GPUs first. */
function holders(cluster: ClusterState): Holder[] {
  const by = new Map<string, Holder>();
  const holder = (owner: string) => {
    let h = by.get(owner);
    if (!h) by.set(owner, (h = { owner, gpus: 0, cpus: 0, jobs: 0, sessions: 0 }));
    return h;
  };
  for (const { state } of cluster.jobs.values()) {
    const attempt = slotHolder(state);
    if (!attempt) continue;
    const h = holder(state.owner);
    h.gpus += attempt.gpus.length;
    h.cpus += attempt.cpus;
    h.jobs += 1;
  }
  for (const { state } of cluster.sessions.values()) {
    const run = runHolder(state);
    if (!run) continue;
    const h = holder(state.owner);
    h.gpus += run.gpus.length;
    h.cpus += run.cpus;
    h.sessions += 1;
  }
  return [...by.values()].sort(
    (a, b) => b.gpus - a.gpus || b.cpus - a.cpus || (a.owner < b.owner ? -1 : 1),
  );
}

/** What a worker is, as placement reads it, without what it runs now. */
export type WorkerShape = Pick<
  WorkerState,
  'id' | 'cpuSlots' | 'memoryBytes' | 'limitsMemory' | 'runtime' | 'dispatchVersion'
> & { gpus: { index: number; name: string; vramBytes: number }[] };

/**
 * Whether no worker of `workers` could ever hold a job of this spec, even with nothing else on
 * it; false when there are no workers to judge by. `spec` is as the cluster runs it (its image
 * policy applied).
 */
export function noWorkerCouldHold(
  spec: JobSpec,
  workers: WorkerShape[],
  policy: PlacementPolicy = DEFAULT_POLICY,
): boolean {
  if (workers.length === 0) return false;
  const candidate: Candidate = {
    kind: 'job',
    id: '',
    resources: spec.resources,
    priority: spec.priority,
    queuedSeq: 0,
    container: runsInContainer(spec),
    estimate: null,
    probe: needsEstimate(spec),
    memoryBytes:
      spec.resources.memoryGb === undefined ? 0 : Math.ceil(spec.resources.memoryGb * 1024 ** 3),
    source: spec,
  };
  return !workers.some((w) =>
    couldEverHold(
      candidate,
      {
        ...w,
        lifecycle: { status: 'online' },
        gpus: w.gpus.map((g) => ({ ...g, reservedBytes: 0, attempts: 0, simulated: false })),
        cpusUsed: 0,
        memoryUsed: 0,
        attempts: new Set(),
        registeredSeq: 0,
        reportedRunning: new Set(),
      },
      policy,
    ),
  );
}
