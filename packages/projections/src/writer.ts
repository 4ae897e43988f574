import { sql, type Kysely, type Transaction } from 'kysely';
import type { StoredEvent } from '@trainyard/events';
import type { Database, ProjectedTable } from './database.ts';
import { PROJECTORS, type Row, type TableProjector } from './projectors/index.ts';

export const LIVE_CHECKPOINT = 'live';
/** Serialises the projector's batches with a rebuild. */
const PROJECTION_LOCK = 7_261_001;

type Db = Kysely<Database> | Transaction<Database>;

function toDbValue(value: unknown, json: boolean) {
  return json && value !== null ? sql`${JSON.stringify(value)}::text::jsonb` : value;
}

async function applyTable<T extends ProjectedTable>(
  trx: Transaction<Database>,
  projector: TableProjector<T>,
  events: readonly StoredEvent[],
): Promise<void> {
  const touched = new Map<string, StoredEvent[]>();
  for (const event of events) {
    const key = projector.keyOf(event);
    if (key === null) continue;
    const list = touched.get(key);
    if (list) list.push(event);
    else touched.set(key, [event]);
  }
  if (touched.size === 0) return;
  const pk = projector.primaryKey;
  const anyTrx = trx as unknown as Kysely<Record<string, Record<string, string>>>;
  const table = projector.table as string;
  const existing = await anyTrx
    .selectFrom(table)
    .selectAll()
    .where(sql.ref(pk), 'in', [...touched.keys()])
    .execute();
  const rows = new Map(existing.map((r) => [String(r[pk]), r as unknown as Row<T>]));
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
  const deletes = [...changed].filter(([, r]) => r === null).map(([k]) => k);
  const upserts = [...changed.values()].filter((r): r is Row<T> => r !== null);
  if (deletes.length) await anyTrx.deleteFrom(table).where(sql.ref(pk), 'in', deletes).execute();
  if (!upserts.length) return;
  const json = new Set<string>(projector.jsonColumns);
  const columns = Object.keys(upserts[0]!);
  const values = upserts.map((r) =>
    Object.fromEntries(
      columns.map((c) => [c, toDbValue((r as Record<string, unknown>)[c], json.has(c))]),
    ),
  );
  await anyTrx
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
    )
    .execute();
}

/** The last sequence applied under `name` (0 when none). */
export async function readCheckpoint(db: Db, name = LIVE_CHECKPOINT): Promise<number> {
  const row = await db
    .selectFrom('projection_checkpoints')
    .select('seq')
    .where('name', '=', name)
    .executeTakeFirst();
  return row?.seq ?? 0;
}

async function writeCheckpoint(trx: Transaction<Database>, seq: number, name: string) {
  await trx
    .insertInto('projection_checkpoints')
    .values({ name, seq })
    .onConflict((oc) => oc.column('name').doUpdateSet({ seq }))
    .execute();
}

/** Takes the projection lock for the rest of the transaction. */
export async function lockProjections(trx: Transaction<Database>): Promise<void> {
  await sql`select pg_advisory_xact_lock(${PROJECTION_LOCK})`.execute(trx);
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
  for (const projector of PROJECTORS) await applyTable(trx, projector, fresh);
  await writeCheckpoint(trx, fresh[fresh.length - 1]!.seq, name);
  return fresh.length;
}

/** Applies one batch in its own transaction, under the projection lock. */
export async function applyBatch(
  db: Kysely<Database>,
  events: readonly StoredEvent[],
): Promise<number> {
  return db.transaction().execute(async (trx) => {
    await lockProjections(trx);
    return applyEvents(trx, events);
  });
}
