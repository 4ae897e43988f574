import type { AttemptsTable } from './tables/attempts.table.ts';
import type { CheckpointsTable } from './tables/checkpoints.table.ts';
import type { JobsTable } from './tables/jobs.table.ts';
import type { UsersTable } from './tables/users.table.ts';
import type { WorkersTable } from './tables/workers.table.ts';

/** Every projection table, by name. */
export interface Database {
  jobs: JobsTable;
  attempts: AttemptsTable;
  workers: WorkersTable;
  users: UsersTable;
  projection_checkpoints: CheckpointsTable;
}

/** The tables a rebuild empties and refills. */
export const PROJECTED_TABLES = ['jobs', 'attempts', 'workers', 'users'] as const;
export type ProjectedTable = (typeof PROJECTED_TABLES)[number];
