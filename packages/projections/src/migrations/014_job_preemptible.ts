import type { Kysely } from 'kysely';

/** Whether a waiting job of a higher priority may stop the job's running attempt. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('jobs')
    .addColumn('preemptible', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
}
