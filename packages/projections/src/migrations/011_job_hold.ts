import type { Kysely } from 'kysely';

/** Who holds a waiting job (`owner` or `admin`), and why; null while it is not held. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('jobs')
    .addColumn('held_by', 'text')
    .addColumn('hold_reason', 'text')
    .execute();
}
