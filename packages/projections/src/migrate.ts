import type { Kysely } from 'kysely';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';
import * as m001 from './migrations/001_initial.ts';
import * as m002 from './migrations/002_user_disabled.ts';
import * as m003 from './migrations/003_outputs_attempt.ts';
import * as m004 from './migrations/004_image_digest.ts';
import * as m005 from './migrations/005_estimates.ts';
import * as m006 from './migrations/006_sessions.ts';
import * as m007 from './migrations/007_session_image.ts';
import * as m008 from './migrations/008_limits_and_dependencies.ts';
import * as m009 from './migrations/009_metrics.ts';
import * as m010 from './migrations/010_user_quota.ts';
import * as m011 from './migrations/011_job_hold.ts';
import * as m012 from './migrations/012_teams.ts';
import * as m013 from './migrations/013_gpu_hours.ts';
import * as m014 from './migrations/014_job_preemptible.ts';
import * as m015 from './migrations/015_array_jobs.ts';
import * as m016 from './migrations/016_gang_jobs.ts';
import * as m017 from './migrations/017_services.ts';

/** Migrations are numbered and forward-only; add the next one here. */
const migrations: Record<string, Migration> = {
  '001_initial': m001,
  '002_user_disabled': m002,
  '003_outputs_attempt': m003,
  '004_image_digest': m004,
  '005_estimates': m005,
  '006_sessions': m006,
  '007_session_image': m007,
  '008_limits_and_dependencies': m008,
  '009_metrics': m009,
  '010_user_quota': m010,
  '011_job_hold': m011,
  '012_teams': m012,
  '013_gpu_hours': m013,
  '014_job_preemptible': m014,
  '015_array_jobs': m015,
  '016_gang_jobs': m016,
  '017_services': m017,
};

const provider: MigrationProvider = { getMigrations: async () => migrations };

export class MigrationError extends Error {
  override name = 'MigrationError';
  readonly code = 'MIGRATION_FAILED';
}

/** Brings the schema up to date. Safe to run from several processes at once. */
export async function migrate<DB>(db: Kysely<DB>): Promise<void> {
  const migrator = new Migrator({
    db: db as Kysely<unknown>,
    provider,
    migrationTableName: 'ty_migrations',
    migrationLockTableName: 'ty_migrations_lock',
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new MigrationError(`migration ${failed} failed: ${(error as Error).message}`, {
      cause: error,
    });
  }
}
