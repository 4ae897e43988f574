import { sql, type Kysely } from 'kysely';

/** Teams with their members and quota; the team each job and session is charged to. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('teams')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull())
    .addColumn('max_gpus', 'integer')
    .addColumn('members', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .execute();
  await db.schema.alterTable('jobs').addColumn('team', 'text').execute();
  await db.schema.alterTable('sessions').addColumn('team', 'text').execute();
}
