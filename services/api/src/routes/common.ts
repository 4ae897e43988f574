import type { FastifyRequest } from 'fastify';
import type { Actor, HoldBy } from '@trainyard/events';
import { loadJobHistory, type JobSnapshot } from '@trainyard/application';
import { sleep } from '@trainyard/service-kit';
import { findJob, readCheckpoint, type JobRow } from '@trainyard/projections';
import type { Caller } from '../auth.ts';
import type { ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';

declare module 'fastify' {
  interface FastifyRequest {
    caller?: Caller;
  }
}

/** The authenticated caller; the auth hook has run for every `/v1` route but login. */
export function callerOf(req: FastifyRequest): Caller {
  if (!req.caller) throw new ApiError('UNAUTHENTICATED', 'missing bearer token');
  return req.caller;
}

export const actorOf = (caller: Caller): Actor => ({ kind: 'user', id: caller.username });

/** Whose hold a caller puts on a job: an admin's stands over its owner's. */
export const holdOf = (caller: Caller): HoldBy => (caller.role === 'admin' ? 'admin' : 'owner');

/**
 * A route hook that refuses non-admins before the body is validated: a user learns nothing
 * about a route they may not call.
 */
export const adminsOnly = async (req: FastifyRequest) => {
  requireAdmin(req);
};

export function requireAdmin(req: FastifyRequest): Caller {
  const caller = callerOf(req);
  if (caller.role !== 'admin') throw new ApiError('FORBIDDEN', 'admins only');
  return caller;
}

/** Runs a read-model query; a database that cannot answer becomes a 503 with a clear code. */
export async function readModel<T>(query: () => Promise<T>): Promise<T> {
  try {
    return await query();
  } catch (cause) {
    throw new ApiError(
      'PROJECTIONS_UNAVAILABLE',
      'the read database is unavailable; commands still work',
      undefined,
      {
        cause,
      },
    );
  }
}

/** Waits until the projections have applied stream sequence `seq` (read-your-writes). */
export async function waitForSeq(deps: ApiDeps, seq: number): Promise<void> {
  const deadline = Date.now() + deps.readYourWritesTimeoutMs;
  let wait = 5;
  while ((await readModel(() => readCheckpoint(deps.db))) < seq) {
    if (Date.now() > deadline) {
      throw new ApiError('PROJECTION_TIMEOUT', `projections have not reached sequence ${seq} yet`);
    }
    await sleep(wait);
    wait = Math.min(wait * 2, 100);
  }
}

const JOB_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** The `:id` route parameter; an id that cannot exist answers 404 like a missing one. */
export function jobIdParam(req: FastifyRequest): string {
  const id = (req.params as { id?: string }).id ?? '';
  if (!JOB_ID.test(id)) throw new ApiError('NOT_FOUND', 'job not found');
  return id;
}

/**
 * A job's row in the read model if the caller may see it; otherwise it does not exist. The row
 * is read once the read model holds the job's last event (one lookup of the job's head), so a
 * read just after the job changed sees the change.
 */
export async function visibleJobRow(deps: ApiDeps, caller: Caller, id: string): Promise<JobRow> {
  let job = await readModel(() => findJob(deps.db, id));
  const { seq } = await deps.bus.store.head('job', id);
  if (seq > (job?.last_seq ?? 0)) {
    await waitForSeq(deps, seq);
    job = await readModel(() => findJob(deps.db, id));
  }
  if (!job || (caller.role !== 'admin' && job.owner !== caller.username)) {
    throw new ApiError('NOT_FOUND', `job ${id} not found`);
  }
  return job;
}

/** Loads a job from the log if the caller may see it; otherwise it does not exist. */
export async function visibleJob(deps: ApiDeps, caller: Caller, id: string): Promise<JobSnapshot> {
  return (await visibleJobHistory(deps, caller, id)).snapshot;
}

/** The same, with the job's events. */
export async function visibleJobHistory(deps: ApiDeps, caller: Caller, id: string) {
  const history = await loadJobHistory(deps.bus.store, id);
  const { state } = history.snapshot;
  if (state.status === 'none' || (caller.role !== 'admin' && state.owner !== caller.username)) {
    throw new ApiError('NOT_FOUND', `job ${id} not found`);
  }
  return history;
}

/** The least memory limit a job or session is given: Docker refuses to start one under 6 MiB. */
const MIN_MEMORY_GB = 0.05;

/** Refuses a memory limit nothing starts in, naming `field`. */
export function refuseTinyMemory(memoryGb: number | undefined, field: string): void {
  if (memoryGb !== undefined && memoryGb < MIN_MEMORY_GB) {
    throw new ApiError(
      'VALIDATION_FAILED',
      `${field}: at least ${MIN_MEMORY_GB} (${MIN_MEMORY_GB * 1024} MiB); nothing starts in less`,
    );
  }
}
