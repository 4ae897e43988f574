import { sql, type Kysely } from 'kysely';

/**
 * Interactive sessions, and the SSH public keys users registered for logging in to them. A key
 * is registered once across all users: its fingerprint names one user to the gateway.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('sessions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('owner', 'text', (c) => c.notNull())
    .addColumn('name', 'text')
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('resources', 'jsonb', (c) => c.notNull())
    .addColumn('timers', 'jsonb', (c) => c.notNull())
    .addColumn('worker_id', 'text')
    .addColumn('run_id', 'text')
    .addColumn('runs', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('gpus', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn('active', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('idle_since', 'timestamptz')
    .addColumn('stop_reason', 'text')
    .addColumn('failure', 'jsonb')
    .addColumn('requeued_because', 'text')
    .addColumn('requested_at', 'timestamptz', (c) => c.notNull())
    .addColumn('started_at', 'timestamptz')
    .addColumn('connected_at', 'timestamptz')
    .addColumn('last_login_at', 'timestamptz')
    .addColumn('ended_at', 'timestamptz')
    .addColumn('last_seq', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('sessions_owner_requested')
    .on('sessions')
    .columns(['owner', 'requested_at'])
    .execute();
  await db.schema.createIndex('sessions_status').on('sessions').column('status').execute();

  await db.schema
    .createTable('ssh_keys')
    .addColumn('fingerprint', 'text', (c) => c.primaryKey())
    .addColumn('username', 'text', (c) => c.notNull())
    .addColumn('public_key', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('added_at', 'timestamptz', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('ssh_keys_username').on('ssh_keys').column('username').execute();
}
