import type { StoredEvent } from '@trainyard/events';
import type { AttemptRow } from '../tables/attempts.table.ts';
import type { TableProjector } from './types.ts';

function attemptIdOf(event: StoredEvent): string | null {
  if (event.aggregate !== 'job') return null;
  switch (event.type) {
    case 'JobAssigned':
    case 'JobStarted':
    case 'JobSucceeded':
    case 'JobEstimated':
    case 'JobAttemptFailed':
      return event.data.attemptId;
    case 'JobCancelled':
      return event.data.attemptId ?? null;
    default:
      return null;
  }
}

function step(row: AttemptRow | undefined, event: StoredEvent): AttemptRow | undefined {
  const at = new Date(event.occurredAt);
  if (event.type === 'JobAssigned') {
    return {
      id: event.data.attemptId,
      job_id: event.aggregateId,
      number: event.data.attempt,
      worker_id: event.data.workerId,
      gpus: event.data.gpus,
      vram_bytes: event.data.vramBytes,
      probe: event.data.probe ?? false,
      members: event.data.members ?? [],
      ports: event.data.ports ?? [],
      status: 'assigned',
      exit_code: null,
      failure: null,
      assigned_at: at,
      started_at: null,
      finished_at: null,
    };
  }
  if (!row) return undefined;
  switch (event.type) {
    case 'JobStarted':
      return { ...row, status: 'running', started_at: at };
    case 'JobSucceeded':
    case 'JobEstimated':
      return { ...row, status: 'succeeded', exit_code: 0, finished_at: at };
    case 'JobAttemptFailed':
      return {
        ...row,
        status: 'failed',
        exit_code: event.data.exitCode,
        failure: event.data.failure,
        finished_at: at,
      };
    case 'JobCancelled':
      return { ...row, status: 'cancelled', finished_at: at };
    default:
      return undefined;
  }
}

/** One row per attempt. */
export const attemptsProjector: TableProjector<'attempts'> = {
  table: 'attempts',
  primaryKey: 'id',
  jsonColumns: ['gpus', 'failure', 'members', 'ports'],
  keyOf: attemptIdOf,
  apply: step,
};
