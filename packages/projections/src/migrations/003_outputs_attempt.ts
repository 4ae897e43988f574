import type { Kysely } from 'kysely';

/**
 * The attempt whose outputs a job shows, so that the API serves them from this table: the
 * worker that held it keeps the files. Rows projected before it have none, and the API reads
 * the job from the log for them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('jobs').addColumn('outputs_attempt_id', 'text').execute();
}
