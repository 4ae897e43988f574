import { sql, type Kysely } from 'kysely';

/**
 * Gang jobs: how many workers a job spans at once, and for an attempt, the workers of its members
 * beyond rank 0 (its GPU time counts every member's GPUs).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('jobs').addColumn('nodes', 'integer').execute();
  await db.schema
    .alterTable('attempts')
    .addColumn('members', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .execute();
}
