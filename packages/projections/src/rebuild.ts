import type { Kysely } from 'kysely';
import type { EventStore, StoredEvent } from '@trainyard/events';
import { PROJECTED_TABLES, type Database } from './database.ts';
import { connectDb } from './connect.ts';
import { migrate } from './migrate.ts';
import { snapshotProjections } from './queries.ts';
import { applyEvents, LIVE_CHECKPOINT, lockProjections, readCheckpoint } from './writer.ts';

export interface RebuildResult {
  events: number;
  lastSeq: number;
  ms: number;
}

/**
 * Drops every projected row and replays the whole log in one transaction. Readers keep
 * seeing the old rows until it commits; the live projector waits on the lock, then carries on
 * from the rebuilt checkpoint.
 */
export async function rebuildProjections(
  db: Kysely<Database>,
  store: EventStore,
  opts: {
    batchSize?: number;
    /** Replay up to this event (default: the newest when the rebuild starts). */
    untilSeq?: number;
    onProgress?: (applied: number, lastSeq: number) => void;
  } = {},
): Promise<RebuildResult> {
  const started = Date.now();
  const batchSize = opts.batchSize ?? 1000;
  return db.transaction().execute(async (trx) => {
    await lockProjections(trx);
    for (const table of PROJECTED_TABLES) await trx.deleteFrom(table).execute();
    await trx.deleteFrom('projection_checkpoints').where('name', '=', LIVE_CHECKPOINT).execute();
    const lastSeq = opts.untilSeq ?? (await store.lastSeq());
    let batch: StoredEvent[] = [];
    let applied = 0;
    for await (const event of store.replay({ untilSeq: lastSeq })) {
      batch.push(event);
      if (batch.length >= batchSize) {
        applied += await applyEvents(trx, batch);
        batch = [];
        opts.onProgress?.(applied, lastSeq);
      }
    }
    if (batch.length) applied += await applyEvents(trx, batch);
    return { events: applied, lastSeq, ms: Date.now() - started };
  });
}

/**
 * Rebuilds the log into `scratchUrl` (an empty database) up to the live checkpoint and returns
 * both that and the live tables, for checking that the live projections are exactly what the log
 * says. The live tables are read under the projection lock, so the projector cannot move on
 * between reading them and their checkpoint.
 */
export async function compareWithRebuild(
  live: Kysely<Database>,
  scratchUrl: string,
  store: EventStore,
) {
  const scratch = connectDb(scratchUrl, { max: 2 });
  try {
    await migrate(scratch);
    const { rows, checkpoint } = await live.transaction().execute(async (trx) => {
      await lockProjections(trx);
      return { rows: await snapshotProjections(trx), checkpoint: await readCheckpoint(trx) };
    });
    await rebuildProjections(scratch, store, { untilSeq: checkpoint });
    return { live: rows, rebuilt: await snapshotProjections(scratch) };
  } finally {
    await scratch.destroy();
  }
}
