import { sql, type Kysely } from 'kysely';

/**
 * Services: what a job is (`job`, or a `service` that runs until stopped) and a service's health
 * check; for an attempt, the ports its service was given.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('jobs')
    .addColumn('kind', 'text', (c) => c.notNull().defaultTo('job'))
    .addColumn('health', 'jsonb')
    .execute();
  await db.schema
    .alterTable('attempts')
    .addColumn('ports', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .execute();
}
