import { Kysely } from 'kysely';
import { PostgresJSDialect } from 'kysely-postgres-js';
import postgres from 'postgres';
import type { Database } from './database.ts';

/** A Kysely handle over postgres.js; int8 comes back as a JS number. */
export function connectDb(url: string, opts: { max?: number } = {}): Kysely<Database> {
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
  return new Kysely<Database>({ dialect: new PostgresJSDialect({ postgres: sql }) });
}
