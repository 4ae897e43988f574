import { sql, type Kysely } from 'kysely';

/**
 * Training metrics: each point a job reported, by the attempt and the worker that read it, named
 * by its source and where its line starts there, so that a point read or sent twice is kept once.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('job_metrics')
    .addColumn('job_id', 'text', (c) => c.notNull())
    .addColumn('attempt', 'integer', (c) => c.notNull())
    .addColumn('worker_id', 'text', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('offset', 'bigint', (c) => c.notNull())
    .addColumn('at', 'timestamptz', (c) => c.notNull())
    .addColumn('step', 'integer')
    .addColumn('epoch', 'integer')
    .addColumn('values', 'jsonb', (c) => c.notNull())
    .addColumn('seq', 'bigserial', (c) => c.notNull())
    .addPrimaryKeyConstraint('job_metrics_pk', [
      'job_id',
      'attempt',
      'worker_id',
      'source',
      'offset',
    ])
    .execute();
  await sql`create index job_metrics_job_seq on job_metrics (job_id, seq)`.execute(db);
}
