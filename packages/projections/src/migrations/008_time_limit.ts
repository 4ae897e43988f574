import type { Kysely } from 'kysely';

/** Time limits: the seconds an attempt of a job may run, where its spec declares a limit. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('jobs').addColumn('time_limit', 'integer').execute();
}
