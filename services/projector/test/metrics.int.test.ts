import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Streams } from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';
import { createTestDatabase, startTestNats, testContext, waitFor } from '@trainyard/testkit';
import { connectDb, migrate, type Database } from '@trainyard/projections';
import { projectMetrics } from '../src/metrics.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let ctx: ServiceContext;
let db: Kysely<Database>;
const stop = new AbortController();
let running: Promise<void>;

const batch = (offset: number, at = new Date().toISOString()) =>
  JSON.stringify({
    points: [{ source: 'output', offset, at, step: offset, epoch: null, values: { loss: offset } }],
  });

beforeAll(async () => {
  nats = await startTestNats();
  ctx = await testContext(nats.url, 'metrics-projector-test');
  db = connectDb(await createTestDatabase(inject('pgUrl')));
  await migrate(db);
  running = projectMetrics(ctx, db, stop.signal);
});

afterAll(async () => {
  stop.abort();
  await running;
  await db?.destroy();
  await ctx?.bus.close();
  await nats?.stop();
});

const kept = async () =>
  (
    await db
      .selectFrom('job_metrics')
      .select(['job_id', 'attempt', 'worker_id', 'offset'])
      .orderBy('seq')
      .execute()
  ).map((r) => `${r.job_id}/${r.attempt}/${r.worker_id}@${r.offset}`);

describe('the metrics projector', () => {
  it('keeps each batch once, drops what is not one or what the database refuses, and goes on', async () => {
    const js = ctx.bus.js;
    await js.publish('ty.metric.job_a.1.w1', batch(1));
    await js.publish('ty.metric.job_a.1.w1', 'not json');
    await js.publish('ty.metric.job_a.1.w1', JSON.stringify({ points: [] }));
    // Year 0 is no date PostgreSQL knows: refused for what it holds, every time.
    await js.publish('ty.metric.job_a.1.w1', batch(2, '0000-01-01T00:00:00.000Z'));
    await js.publish('ty.metric.job_a.x.w1', batch(3));
    await js.publish('ty.metric.job_a.1.w1', batch(1));
    await js.publish('ty.metric.job_b.2.w2', batch(4));
    await waitFor('the batches after the bad ones', async () => (await kept()).length === 2);
    expect(await kept()).toEqual(['job_a/1/w1@1', 'job_b/2/w2@4']);
    await waitFor('every message settled', async () => {
      const info = await ctx.bus.jsm.consumers.info(Streams.metrics, 'projector-metrics');
      return info.num_pending === 0 && info.num_ack_pending === 0;
    });
  });

  it('waits for the database and keeps what came meanwhile', async () => {
    await sql`alter table job_metrics rename to job_metrics_away`.execute(db);
    try {
      await ctx.bus.js.publish('ty.metric.job_c.1.w1', batch(5));
      await new Promise((r) => setTimeout(r, 1_000));
    } finally {
      await sql`alter table job_metrics_away rename to job_metrics`.execute(db);
    }
    await waitFor('the batch that waited', async () => (await kept()).includes('job_c/1/w1@5'));
  });
});
