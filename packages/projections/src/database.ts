import type { AttemptsTable } from './tables/attempts.table.ts';
import type { CheckpointsTable } from './tables/checkpoints.table.ts';
import type { JobsTable } from './tables/jobs.table.ts';
import type { JobMetricsTable } from './tables/job-metrics.table.ts';
import type { SessionsTable } from './tables/sessions.table.ts';
import type { SshKeysTable } from './tables/ssh-keys.table.ts';
import type { TeamsTable } from './tables/teams.table.ts';
import type { UsersTable } from './tables/users.table.ts';
import type { WorkersTable } from './tables/workers.table.ts';

/** Every projection table, by name. */
export interface Database {
  jobs: JobsTable;
  attempts: AttemptsTable;
  workers: WorkersTable;
  users: UsersTable;
  sessions: SessionsTable;
  ssh_keys: SshKeysTable;
  teams: TeamsTable;
  projection_checkpoints: CheckpointsTable;
  /** Filled from the metrics stream, not the log: a rebuild leaves it be. */
  job_metrics: JobMetricsTable;
}

/** The tables a rebuild empties and refills. */
export const PROJECTED_TABLES = [
  'jobs',
  'attempts',
  'workers',
  'users',
  'sessions',
  'ssh_keys',
  'teams',
] as const;
export type ProjectedTable = (typeof PROJECTED_TABLES)[number];
