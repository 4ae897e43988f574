import type { Kysely } from 'kysely';

/** The digest of the image built for a job that runs in a container. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('jobs').addColumn('image_digest', 'text').execute();
}
