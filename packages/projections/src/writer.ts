import { sql, type CompiledQuery, type Kysely, type Transaction } from 'kysely';
import type { StoredEvent } from '@trainyard/events';
import { postgresClientOf } from './connect.ts';
import type { Database, ProjectedTable } from './database.ts';
import { PROJECTORS, type Row, type TableProjector } from './projectors/index.ts';

export const LIVE_CHECKPOINT = 'live';
/** Serialises the projector's batches with a rebuild. */
const PROJECTION_LOCK = 7_261_001;

type Db = Kysely<Database> | Transaction<Database>;

/** What PostgreSQL refuses in text and jsonb: NUL, and (escaped by JSON) a lone surrogate. */
const UNSTORABLE = /\\u0000|\\ud[89a-f][0-9a-f]{2}/i;

/**
 * Text PostgreSQL holds: a NUL, or half of a character, that an event carries (a job's command,
 * what its health check printed) becomes U+FFFD, rather than stop the projection for everyone.
 */
function storable(text: string): string {
  return text.replace(NUL_OR_HALF, '\uFFFD');
}
const NUL_OR_HALF = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

function toDbValue(value: unknown, json: boolean) {
  if (typeof value === 'string') return storable(value);
  if (!json || value === null) return value;
  const text = JSON.stringify(value);
  const kept = UNSTORABLE.test(text)
    ? JSON.stringify(value, (_key, v: unknown) => (typeof v === 'string' ? storable(v) : v))
    : text;
  return sql`${kept}::text::jsonb`;
}

type AnyDb = Kysely<Record<string, Record<string, unknown>>>;

/** A statement that runs in a Kysely transaction, or is compiled and sent in a pipeline. */
interface Statement {
  compile(): CompiledQuery;
  execute(): Promise<unknown>;
}

/** The events of `events` that touch each row of `projector`'s table, by primary key. */
function touchedRows<T extends ProjectedTable>(
  projector: TableProjector<T>,
  events: readonly StoredEvent[],
): Map<string, StoredEvent[]> {
  const touched = new Map<string, StoredEvent[]>();
  for (const event of events) {
    const key = projector.keyOf(event);
    if (key === null) continue;
    const list = touched.get(key);
    if (list) list.push(event);
    else touched.set(key, [event]);
  }
  return touched;
}

function selectRows<T extends ProjectedTable>(
  db: Db,
  projector: TableProjector<T>,
  keys: readonly string[],
) {
  return (db as unknown as AnyDb)
    .selectFrom(projector.table)
    .selectAll()
    .where(sql.ref(projector.primaryKey), 'in', keys);
}

/** The statements that bring the rows in `existing` up to date with the events in `touched`. */
function rowWrites<T extends ProjectedTable>(
  db: Db,
  projector: TableProjector<T>,
  touched: ReadonlyMap<string, readonly StoredEvent[]>,
  existing: readonly unknown[],
): Statement[] {
  const pk = projector.primaryKey;
  const rows = new Map(
    existing.map((r) => [String((r as Record<string, unknown>)[pk]), r as Row<T>]),
  );
  const changed = new Map<string, Row<T> | null>();
  for (const [key, list] of touched) {
    let row: Row<T> | undefined = rows.get(key);
    let dirty = false;
    for (const event of list) {
      const next = projector.apply(row, event);
      if (next === undefined) continue;
      dirty = true;
      row = next ?? undefined;
    }
    if (dirty) changed.set(key, row ?? null);
  }
  const anyDb = db as unknown as AnyDb;
  const table = projector.table as string;
  const statements: Statement[] = [];
  const deletes = [...changed].filter(([, r]) => r === null).map(([k]) => k);
  if (deletes.length) statements.push(anyDb.deleteFrom(table).where(sql.ref(pk), 'in', deletes));
  const upserts = [...changed.values()].filter((r): r is Row<T> => r !== null);
  if (!upserts.length) return statements;
  const json = new Set<string>(projector.jsonColumns);
  const columns = Object.keys(upserts[0]!);
  const values = upserts.map((r) =>
    Object.fromEntries(
      columns.map((c) => [c, toDbValue((r as Record<string, unknown>)[c], json.has(c))]),
    ),
  );
  statements.push(
    anyDb
      .insertInto(table)
      .values(values as never)
      .onConflict((oc) =>
        oc
          .column(pk)
          .doUpdateSet(
            Object.fromEntries(
              columns.filter((c) => c !== pk).map((c) => [c, sql.ref(`excluded.${c}`)]),
            ) as never,
          ),
      ),
  );
  return statements;
}

/** The last sequence applied under `name` (0 when none). */
export async function readCheckpoint(db: Db, name = LIVE_CHECKPOINT): Promise<number> {
  const row = await selectCheckpoint(db, name).executeTakeFirst();
  return row?.seq ?? 0;
}

function selectCheckpoint(db: Db, name: string) {
  return db.selectFrom('projection_checkpoints').select('seq').where('name', '=', name);
}

function writeCheckpoint(db: Db, seq: number, name: string): Statement {
  return db
    .insertInto('projection_checkpoints')
    .values({ name, seq })
    .onConflict((oc) => oc.column('name').doUpdateSet({ seq }));
}

const takeLock = sql`select pg_advisory_xact_lock(${PROJECTION_LOCK})`;

/** Takes the projection lock for the rest of the transaction. */
export async function lockProjections(trx: Transaction<Database>): Promise<void> {
  await takeLock.execute(trx);
}

/**
 * Applies a batch of events inside `trx`, skipping any at or below the checkpoint, and moves
 * the checkpoint in the same transaction: each event is applied exactly once.
 * Returns how many events were applied.
 */
export async function applyEvents(
  trx: Transaction<Database>,
  events: readonly StoredEvent[],
  name = LIVE_CHECKPOINT,
): Promise<number> {
  const checkpoint = await readCheckpoint(trx, name);
  const fresh = events.filter((e) => e.seq > checkpoint);
  if (fresh.length === 0) return 0;
  for (const projector of PROJECTORS) {
    const touched = touchedRows(projector, fresh);
    if (touched.size === 0) continue;
    const existing = await selectRows(trx, projector, [...touched.keys()]).execute();
    for (const statement of rowWrites(trx, projector, touched, existing)) await statement.execute();
  }
  await writeCheckpoint(trx, fresh[fresh.length - 1]!.seq, name).execute();
  return fresh.length;
}

/**
 * Applies one batch in its own transaction, under the projection lock, in two round trips: the
 * lock, the checkpoint and the rows the batch touches are read together, then the rows, the
 * checkpoint and the commit are written together. Returns how many events were applied.
 */
export async function applyBatch(
  db: Kysely<Database>,
  events: readonly StoredEvent[],
  name = LIVE_CHECKPOINT,
): Promise<number> {
  const tables = PROJECTORS.map((projector) => ({
    projector,
    touched: touchedRows(projector, events),
  })).filter((t) => t.touched.size > 0);
  const conn = await postgresClientOf(db).reserve();
  const send = (q: CompiledQuery) =>
    conn.unsafe(q.sql, [...q.parameters] as never[], { prepare: true });
  let open = false;
  try {
    open = true;
    const [, , checkpointRows, ...existing] = await Promise.all([
      conn.unsafe('begin'),
      send(takeLock.compile(db)),
      send(selectCheckpoint(db, name).compile()),
      ...tables.map((t) => send(selectRows(db, t.projector, [...t.touched.keys()]).compile())),
    ]);
    const checkpoint = Number((checkpointRows as { seq?: number }[])[0]?.seq ?? 0);
    const fresh = events.filter((e) => e.seq > checkpoint);
    if (fresh.length === 0) {
      await conn.unsafe('rollback');
      open = false;
      return 0;
    }
    const writes = tables.flatMap((t, i) => {
      const touched = fresh.length === events.length ? t.touched : touchedRows(t.projector, fresh);
      return touched.size ? rowWrites(db, t.projector, touched, existing[i]!) : [];
    });
    writes.push(writeCheckpoint(db, fresh[fresh.length - 1]!.seq, name));
    await Promise.all([...writes.map((w) => send(w.compile())), conn.unsafe('commit')]);
    open = false;
    return fresh.length;
  } catch (err) {
    if (open) await conn.unsafe('rollback').catch(() => undefined);
    throw err;
  } finally {
    conn.release();
  }
}
