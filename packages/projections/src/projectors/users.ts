import { ofAggregate, type StoredEvent } from '@trainyard/events';
import type { UserRow } from '../tables/users.table.ts';
import type { TableProjector } from './types.ts';

function step(row: UserRow | undefined, event: StoredEvent): UserRow | undefined {
  if (!ofAggregate(event, 'user')) return undefined;
  switch (event.type) {
    case 'UserCreated':
      return {
        username: event.data.username,
        role: event.data.role,
        created_at: new Date(event.occurredAt),
        disabled_at: null,
        max_gpus: null,
        max_gpu_hours: null,
      };
    case 'UserDisabled':
      return row && { ...row, disabled_at: new Date(event.occurredAt) };
    case 'UserQuotaSet':
      return row && { ...row, max_gpus: event.data.maxGpus };
    case 'UserGpuHoursQuotaSet':
      return row && { ...row, max_gpu_hours: event.data.maxGpuHours };
    default:
      return row;
  }
}

/** One row per user (never credentials: those are not in the log). */
export const usersProjector: TableProjector<'users'> = {
  table: 'users',
  primaryKey: 'username',
  jsonColumns: [],
  keyOf: (event) => (event.aggregate === 'user' ? event.aggregateId : null),
  apply: step,
};
