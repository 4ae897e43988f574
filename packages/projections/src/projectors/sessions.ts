import { ofAggregate, type StoredEvent } from '@trainyard/events';
import type { SessionRow } from '../tables/sessions.table.ts';
import type { TableProjector } from './types.ts';

const ENDED = new Set(['stopped', 'failed']);

/** The row once its run ended: no worker holds it and no channel is open. */
const unplaced = (): Pick<
  SessionRow,
  'worker_id' | 'run_id' | 'gpus' | 'active' | 'idle_since'
> => ({ worker_id: null, run_id: null, gpus: [], active: false, idle_since: null });

/**
 * Follows the session decider's `evolveSession`, flattened to the current run: the row shows
 * where the session runs now, not its history of runs (the log keeps that).
 */
function step(row: SessionRow | undefined, event: StoredEvent): SessionRow | undefined {
  if (!ofAggregate(event, 'session')) return undefined;
  const at = new Date(event.occurredAt);
  if (event.type === 'SessionRequested') {
    const { owner, spec, timers, image, build } = event.data;
    return {
      id: event.aggregateId,
      owner,
      team: event.data.team ?? null,
      name: spec.name ?? null,
      status: build ? 'building' : 'queued',
      resources: spec.resources,
      timers,
      from_job: spec.fromJob ?? null,
      base_image: spec.image ?? null,
      image_digest: image?.digest ?? null,
      ...unplaced(),
      runs: 0,
      stop_reason: null,
      failure: null,
      requeued_because: null,
      requested_at: at,
      started_at: null,
      connected_at: null,
      last_login_at: null,
      ended_at: null,
      last_seq: event.seq,
    };
  }
  if (!row) return undefined;
  const next = { ...row, last_seq: event.seq };
  switch (event.type) {
    case 'SessionBuildStarted':
      return next;
    case 'SessionBuilt':
      return { ...next, status: 'queued', image_digest: event.data.image.digest };
    case 'SessionAssigned':
      return {
        ...next,
        status: 'starting',
        worker_id: event.data.workerId,
        run_id: event.data.runId,
        runs: event.data.run,
        gpus: event.data.gpus,
      };
    case 'SessionStarted':
      return {
        ...next,
        status: row.status === 'stopping' ? 'stopping' : 'running',
        started_at: at,
        connected_at: null,
        active: false,
        idle_since: at,
        requeued_because: null,
      };
    case 'SessionStopRequested':
      return { ...next, status: 'stopping', stop_reason: event.data.reason };
    case 'SessionStopped':
      return { ...next, ...unplaced(), status: 'stopped', ended_at: at };
    case 'SessionFailed':
      return {
        ...next,
        ...unplaced(),
        status: 'failed',
        failure: event.data.failure,
        ended_at: at,
      };
    case 'SessionRequeued':
      return {
        ...next,
        ...unplaced(),
        status: 'queued',
        started_at: null,
        connected_at: null,
        requeued_because: event.data.reason,
      };
    case 'SessionLogin': {
      if (!event.data.accepted) return next;
      const first = row.connected_at === null && row.status === 'running';
      return { ...next, last_login_at: at, ...(first && { connected_at: at }) };
    }
    case 'SessionActivity':
      if (event.data.runId !== row.run_id || ENDED.has(row.status)) return next;
      return { ...next, active: event.data.active, idle_since: event.data.active ? null : at };
    default: {
      const never: never = event;
      throw new Error(`unhandled session event ${JSON.stringify(never)}`);
    }
  }
}

/** One row per session: its public status, where it runs now, and its timers. */
export const sessionsProjector: TableProjector<'sessions'> = {
  table: 'sessions',
  primaryKey: 'id',
  jsonColumns: ['resources', 'timers', 'gpus', 'failure'],
  keyOf: (event) => (event.aggregate === 'session' ? event.aggregateId : null),
  apply: step,
};
