import { ofAggregate, type StoredEvent } from '@trainyard/events';
import type { TeamRow } from '../tables/teams.table.ts';
import type { TableProjector } from './types.ts';

function step(row: TeamRow | undefined, event: StoredEvent): TeamRow | undefined {
  if (!ofAggregate(event, 'team')) return undefined;
  switch (event.type) {
    case 'TeamCreated':
      return {
        name: event.aggregateId,
        created_at: new Date(event.occurredAt),
        max_gpus: null,
        max_gpu_hours: null,
        members: [],
      };
    case 'TeamMemberAdded': {
      if (!row) return row;
      const { username, role } = event.data;
      const known = row.members.some((m) => m.username === username);
      return {
        ...row,
        members: known
          ? row.members.map((m) => (m.username === username ? { ...m, role } : m))
          : [...row.members, { username, role, since: event.occurredAt }],
      };
    }
    case 'TeamMemberRemoved':
      return (
        row && { ...row, members: row.members.filter((m) => m.username !== event.data.username) }
      );
    case 'TeamQuotaSet':
      return row && { ...row, max_gpus: event.data.maxGpus };
    case 'TeamGpuHoursQuotaSet':
      return row && { ...row, max_gpu_hours: event.data.maxGpuHours };
    default:
      return row;
  }
}

/** One row per team, its members in the order they joined. */
export const teamsProjector: TableProjector<'teams'> = {
  table: 'teams',
  primaryKey: 'name',
  jsonColumns: ['members'],
  keyOf: (event) => (event.aggregate === 'team' ? event.aggregateId : null),
  apply: step,
};
