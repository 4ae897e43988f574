import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EMPTY_HEAD } from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';
import {
  createTestDatabase,
  jobSubmitted,
  startTestNats,
  testContext,
  testMeta,
  waitFor,
} from '@trainyard/testkit';
import { connectDb, migrate, readCheckpoint, type Database } from '@trainyard/projections';
import { startProjector } from '../src/projector.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let ctx: ServiceContext;
let url: string;
const handles: Kysely<Database>[] = [];

beforeAll(async () => {
  nats = await startTestNats();
  ctx = await testContext(nats.url, 'projector-test');
  url = await createTestDatabase(inject('pgUrl'));
});

afterAll(async () => {
  for (const db of handles) await db.destroy();
  await ctx?.bus.close();
  await nats?.stop();
});

const connect = () => {
  const db = connectDb(url);
  handles.push(db);
  return db;
};

const submitted = async (id: string) =>
  (
    await ctx.bus.store.append({
      aggregate: 'job',
      aggregateId: id,
      head: EMPTY_HEAD,
      events: [jobSubmitted()],
      meta: testMeta(),
    })
  ).head.seq;

describe('the projector', () => {
  it('stops at once while a batch waits on the database, leaving it to be applied again', async () => {
    const db = connect();
    await migrate(db);
    const projector = await startProjector(ctx, db);
    const first = await submitted('job_a');
    await waitFor('the first job projected', async () => (await readCheckpoint(db)) >= first);

    // Another client holds the checkpoints table: the next batch waits on its lock.
    let release = () => undefined as void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked = () => undefined as void;
    const lockTaken = new Promise<void>((resolve) => (locked = resolve));
    const holder = connect()
      .transaction()
      .execute(async (trx) => {
        await sql`lock table projection_checkpoints in access exclusive mode`.execute(trx);
        locked();
        await held;
      });
    await lockTaken;
    await submitted('job_b');
    const watcher = connect();
    await waitFor('the batch to wait on the lock', async () => {
      const { rows } = await sql<{ n: number }>`
        select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'`.execute(watcher);
      return rows[0]!.n > 0;
    });

    const started = Date.now();
    await projector.stop();
    // Without giving the batch up it would wait out its 10 s deadline.
    expect(Date.now() - started).toBeLessThan(5_000);

    release();
    await holder;
    const again = await startProjector(ctx, db);
    const last = await ctx.bus.store.lastSeq();
    await waitFor('the second job projected', async () => (await readCheckpoint(db)) >= last);
    await again.stop();
  });
});
