import type { Kysely } from 'kysely';

/**
 * Time limits and dependencies: the seconds an attempt of a job may run, where its spec declares
 * a limit; the jobs it depends on, and whether they have all succeeded. And what placement reads
 * of a worker beyond its GPUs and CPU slots, to refuse a job no worker could ever hold.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('jobs')
    .addColumn('time_limit', 'integer')
    .addColumn('depends_on', 'jsonb', (c) => c.notNull().defaultTo('[]'))
    .addColumn('dependencies_met', 'boolean', (c) => c.notNull().defaultTo(true))
    .execute();
  await db.schema.alterTable('workers').addColumn('capacity', 'jsonb').execute();
}
