import { Kysely } from 'kysely';
import { PostgresJSDialect } from 'kysely-postgres-js';
import postgres from 'postgres';
import type { Database } from './database.ts';

/** The postgres.js client under a Kysely handle. */
export type PostgresClient = postgres.Sql<{ bigint: number }>;

const clients = new WeakMap<Kysely<Database>, PostgresClient>();

/**
 * How long closing waits for queries in flight. Without a bound, closing while PostgreSQL is
 * away waits forever for connections that never come.
 */
const END_TIMEOUT_SECONDS = 5;

/**
 * Whether `reason` is the failure of the array-types lookup postgres.js makes on each new
 * connection: it drops that promise (porsager/postgres#1192), so a database that goes away as a
 * connection starts rejects it where no caller can catch it. The query the connection was opened
 * for fails or is retried on its own.
 */
export function isTypeLookupFailure(reason: unknown): boolean {
  const query = (reason as { query?: unknown } | null)?.query;
  return typeof query === 'string' && query.includes('pg_catalog.pg_type');
}

let guarded = false;

/**
 * Keeps that one rejection from ending the process; any other unhandled rejection ends it, as
 * Node's default would.
 */
function guardTypeLookups(): void {
  if (guarded) return;
  guarded = true;
  process.on('unhandledRejection', (reason) => {
    if (isTypeLookupFailure(reason)) return;
    throw reason;
  });
}

/** A Kysely handle over postgres.js; int8 comes back as a JS number. */
export function connectDb(url: string, opts: { max?: number } = {}): Kysely<Database> {
  guardTypeLookups();
  const sql = postgres(url, {
    max: opts.max ?? 10,
    prepare: false,
    onnotice: () => undefined,
    connect_timeout: 5,
    types: {
      bigint: {
        to: 20,
        from: [20],
        serialize: (x: number) => String(x),
        parse: (x: string) => Number(x),
      },
    },
  });
  const end = sql.end.bind(sql);
  sql.end = ({ timeout = END_TIMEOUT_SECONDS } = {}) => end({ timeout });
  const db = new Kysely<Database>({ dialect: new PostgresJSDialect({ postgres: sql }) });
  clients.set(db, sql);
  return db;
}

/**
 * The postgres.js client under a handle made by `connectDb`, for statements sent together in
 * one round trip (a Kysely transaction runs its queries one after another).
 */
export function postgresClientOf(db: Kysely<Database>): PostgresClient {
  const sql = clients.get(db);
  if (!sql) throw new Error('this database handle was not made by connectDb');
  return sql;
}
