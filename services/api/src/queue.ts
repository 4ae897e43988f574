import { describeNeed, noWorkerCouldHold, type Need, type WorkerShape } from '@trainyard/domain';
import { QueueReplySchema, Subjects, type QueueReply, type QueueRequest } from '@trainyard/events';
import { listWorkers, type WorkerRow } from '@trainyard/projections';
import type { ApiDeps } from './deps.ts';
import { ApiError } from './errors.ts';

/** How long the leading scheduler has to answer a question about the queue. */
const ASK_TIMEOUT_MS = 2_000;
/** How long one read of the workers serves the check at submit. */
const WORKERS_FRESH_MS = 2_000;

/**
 * Asks the leading scheduler about the queue; null when none answers (no leader yet, or one
 * busy past the timeout), for a caller that can do without.
 */
export async function askScheduler(
  deps: Pick<ApiDeps, 'bus' | 'log'>,
  request: QueueRequest,
  timeoutMs = ASK_TIMEOUT_MS,
): Promise<QueueReply | null> {
  try {
    const msg = await deps.bus.nc.request(Subjects.queue, JSON.stringify(request), {
      timeout: timeoutMs,
    });
    const reply = QueueReplySchema.safeParse(msg.json());
    if (reply.success) return reply.data;
    deps.log.warn({ issues: reply.error.issues }, 'the scheduler answered a queue request oddly');
    return null;
  } catch (err) {
    deps.log.debug({ err }, 'no scheduler answered a queue request');
    return null;
  }
}

/**
 * Where a job or session stands in the scheduler's queue, while it `waits`: its position and why
 * it waits; nulls when it does not wait or no scheduler answers in time.
 */
export async function pendingFields(
  deps: Pick<ApiDeps, 'bus' | 'log'>,
  id: string,
  waits: boolean,
) {
  const entry = waits
    ? ((await askScheduler(deps, { op: 'explain', id }, 1_000))?.entries[0] ?? null)
    : null;
  return {
    queuePosition: entry?.position ?? null,
    pendingReason: entry?.reason ?? null,
    pendingMessage: entry?.message ?? null,
    expectedStart: entry?.expectedStart ?? null,
  };
}

/** The same, for a route that has nothing to answer without it. */
export async function queueOrUnavailable(
  deps: Pick<ApiDeps, 'bus' | 'log'>,
  request: QueueRequest,
): Promise<QueueReply> {
  const reply = await askScheduler(deps, request);
  if (!reply) {
    throw new ApiError(
      'SCHEDULER_UNAVAILABLE',
      'no scheduler answered: it may be starting or catching up; try again shortly',
    );
  }
  return reply;
}

const shapes = new WeakMap<object, { atMs: number; workers: WorkerShape[] }>();

/** Every registered worker as placement reads it, read again at most every 2 s. */
async function registeredWorkers(deps: Pick<ApiDeps, 'db'>): Promise<WorkerShape[]> {
  const cached = shapes.get(deps.db);
  if (cached && Date.now() - cached.atMs < WORKERS_FRESH_MS) return cached.workers;
  const workers = (await listWorkers(deps.db)).map(workerShapeOf);
  shapes.set(deps.db, { atMs: Date.now(), workers });
  return workers;
}

/**
 * A worker's row as placement reads it. A row projected before capacities were recorded says
 * nothing of its memory, limits or dispatch version: it is taken to hold whatever those allow,
 * so that nothing is refused on what the projection does not know.
 */
export function workerShapeOf(w: WorkerRow): WorkerShape {
  return {
    id: w.id,
    cpuSlots: w.cpu_slots,
    runtime: w.runtime,
    gpus: w.gpus,
    memoryBytes: w.capacity ? w.capacity.memoryBytes : null,
    limitsMemory: w.capacity ? w.capacity.limitsMemory : true,
    dispatchVersion: w.capacity ? w.capacity.dispatchVersion : Number.MAX_SAFE_INTEGER,
  };
}

/**
 * Refuses a job or session no registered worker could ever hold, even with nothing else on it.
 * Where the workers cannot be read, or none has registered yet, it is taken: nothing says it
 * cannot run.
 */
export async function refuseUnsatisfiable(
  deps: Pick<ApiDeps, 'db' | 'log'>,
  need: Need,
): Promise<void> {
  const workers = await registeredWorkers(deps).catch((err: unknown) => {
    deps.log.warn({ err }, `could not read the workers to check a ${need.kind} fits one`);
    return [];
  });
  if (!noWorkerCouldHold(need, workers)) return;
  const listed = workers.slice(0, 5).map(describeWorker).join('; ');
  throw new ApiError(
    'UNSATISFIABLE',
    need.nodes > 1
      ? `fewer than ${need.nodes} registered workers could ever run a member of this gang job: it needs ${describeNeed(need.resources, need.container)} on each of ${need.nodes} workers at once; the workers are ${listed}${workers.length > 5 ? '; …' : ''}`
      : `no registered worker could ever run this ${need.service ? 'service' : need.kind}: it needs ${describeNeed(need.resources, need.container)}${need.service ? ' on a worker that watches the health of services (dispatch version 6: upgrade older workers)' : ''}; the workers are ${listed}${workers.length > 5 ? '; …' : ''}`,
  );
}

const GiB = 1024 ** 3;

/** A worker in words: its runtime, GPUs and CPU slots. */
function describeWorker(w: WorkerShape): string {
  const largest = Math.max(0, ...w.gpus.map((g) => g.vramBytes));
  const gpus =
    w.gpus.length === 0
      ? 'no GPUs'
      : `${w.gpus.length} GPU${w.gpus.length === 1 ? '' : 's'} of up to ${Math.floor(largest / GiB)} GiB`;
  return `${w.id} (${w.runtime}: ${gpus}, ${w.cpuSlots} CPU slots)`;
}
