import type { Kysely } from 'kysely';

/**
 * Array jobs: how many shards an array job has, and for a shard, its array job and index (the
 * shards of one array job are read together, in order).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('jobs')
    .addColumn('shards', 'integer')
    .addColumn('shard_of', 'text')
    .addColumn('shard_index', 'integer')
    .execute();
  await db.schema
    .createIndex('jobs_shard_of_idx')
    .on('jobs')
    .columns(['shard_of', 'shard_index'])
    .where('shard_of', 'is not', null)
    .execute();
}
