import type { Kysely } from 'kysely';

/** The GPU-hours a calendar month a user's work, or a team's, may take, where one is set. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('users').addColumn('max_gpu_hours', 'double precision').execute();
  await db.schema.alterTable('teams').addColumn('max_gpu_hours', 'double precision').execute();
}
