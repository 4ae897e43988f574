import type { Kysely } from 'kysely';

/** The job a session runs from, and the digest of the image it runs in (in a container). */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('sessions')
    .addColumn('from_job', 'text')
    .addColumn('image_digest', 'text')
    .execute();
}
