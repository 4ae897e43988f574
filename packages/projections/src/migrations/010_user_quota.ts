import type { Kysely } from 'kysely';

/** The most GPUs a user's work may hold at once, where an admin set a quota. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('users').addColumn('max_gpus', 'integer').execute();
}
