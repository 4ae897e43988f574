import type { Kysely } from 'kysely';

/**
 * Probes: whether a job is measured before it is placed, what its probe measured, and which of
 * its attempts was the probe. Rows projected before probes measure nothing.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('jobs')
    .addColumn('estimates', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('estimate', 'jsonb')
    .execute();
  await db.schema
    .alterTable('attempts')
    .addColumn('probe', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
}
