import type { Kysely } from 'kysely';

/** Users an admin disabled. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('users').addColumn('disabled_at', 'timestamptz').execute();
}
