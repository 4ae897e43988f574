import type { Kysely } from 'kysely';

/**
 * What a session in a container runs in: the job whose image it is, or the base image its own
 * is built on, and the image's digest.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('sessions')
    .addColumn('from_job', 'text')
    .addColumn('base_image', 'text')
    .addColumn('image_digest', 'text')
    .execute();
}
