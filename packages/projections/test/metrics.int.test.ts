import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { MetricPoint } from '@trainyard/events';
import { createTestDatabase } from '@trainyard/testkit';
import {
  connectDb,
  listMetricPoints,
  migrate,
  recordMetrics,
  summarizeMetrics,
  type Database,
} from '../src/index.ts';

let db: Kysely<Database>;

const point = (offset: number, values: Record<string, number>, place: Partial<MetricPoint> = {}) =>
  ({
    source: 'output',
    offset,
    at: new Date(Date.UTC(2026, 0, 1, 0, 0, offset)).toISOString(),
    step: null,
    epoch: null,
    values,
    ...place,
  }) as MetricPoint;

async function attempt(jobId: string, number: number, workerId: string, probe = false) {
  await db
    .insertInto('attempts')
    .values({
      id: `${jobId}-a${number}`,
      job_id: jobId,
      number,
      worker_id: workerId,
      gpus: [],
      vram_bytes: 0,
      probe,
      status: 'succeeded',
      exit_code: 0,
      failure: null,
      assigned_at: new Date(),
      started_at: new Date(),
      finished_at: new Date(),
    })
    .execute();
}

beforeAll(async () => {
  db = connectDb(await createTestDatabase(inject('pgUrl')));
  await migrate(db);
});

afterAll(async () => {
  await db.destroy();
});

describe('job metrics', () => {
  it('adds up the last value, the extremes and the final epoch’s mean, across attempts', async () => {
    await attempt('j1', 1, 'w1');
    await attempt('j1', 2, 'w2');
    await recordMetrics(db, { jobId: 'j1', attempt: 1, workerId: 'w1' }, [
      point(0, { loss: 4 }, { step: 1, epoch: 0 }),
      point(10, { loss: 3, acc: 0.1 }, { step: 2, epoch: 0 }),
      point(20, { loss: 2 }, { step: 3, epoch: 1 }),
    ]);
    await recordMetrics(db, { jobId: 'j1', attempt: 2, workerId: 'w2' }, [
      point(0, { loss: 1.5 }, { step: 3, epoch: 1 }),
      point(5, { loss: 0.5, acc: 0.9 }, { step: 4, epoch: 1, source: 'file' }),
    ]);
    const summary = await summarizeMetrics(db, 'j1');
    expect(summary).toEqual([
      {
        name: 'acc',
        count: 2,
        last: 0.9,
        min: 0.1,
        max: 0.9,
        finalEpoch: 1,
        finalEpochMean: 0.9,
      },
      {
        name: 'loss',
        count: 5,
        last: 0.5,
        min: 0.5,
        max: 4,
        finalEpoch: 1,
        finalEpochMean: (2 + 1.5 + 0.5) / 3,
      },
    ]);
  });

  it('adds up values near the largest a double holds without overflowing', async () => {
    await attempt('j5', 1, 'w1');
    await recordMetrics(db, { jobId: 'j5', attempt: 1, workerId: 'w1' }, [
      point(0, { x: 1.5e308 }),
      point(1, { x: 1.5e308 }),
      point(2, { x: 0 }),
    ]);
    expect(await summarizeMetrics(db, 'j5')).toEqual([
      expect.objectContaining({ name: 'x', max: 1.5e308, finalEpochMean: 1e308 }),
    ]);
  });

  it('keeps a point sent twice once', async () => {
    await attempt('j2', 1, 'w1');
    const batch = [point(0, { loss: 1 }), point(7, { loss: 3 })];
    await recordMetrics(db, { jobId: 'j2', attempt: 1, workerId: 'w1' }, batch);
    await recordMetrics(db, { jobId: 'j2', attempt: 1, workerId: 'w1' }, batch);
    const [loss] = await summarizeMetrics(db, 'j2');
    expect(loss).toMatchObject({ count: 2, finalEpoch: null, finalEpochMean: 2, last: 3 });
  });

  it('counts only the worker that held the attempt, and never a probe', async () => {
    await attempt('j3', 1, 'w1', true);
    await attempt('j3', 2, 'w1');
    await recordMetrics(db, { jobId: 'j3', attempt: 1, workerId: 'w1' }, [point(0, { loss: 9 })]);
    await recordMetrics(db, { jobId: 'j3', attempt: 2, workerId: 'intruder' }, [
      point(0, { loss: 99 }),
    ]);
    await recordMetrics(db, { jobId: 'j3', attempt: 3, workerId: 'w1' }, [point(0, { loss: 7 })]);
    await recordMetrics(db, { jobId: 'j3', attempt: 2, workerId: 'w1' }, [point(0, { loss: 1 })]);
    expect(await summarizeMetrics(db, 'j3')).toEqual([
      expect.objectContaining({ name: 'loss', count: 1, last: 1 }),
    ]);
    expect((await listMetricPoints(db, 'j3', { limit: 10 })).map((p) => p.values)).toEqual([
      { loss: 1 },
    ]);
  });

  it('lists points page by page, in the order they arrived, one attempt’s where asked', async () => {
    await attempt('j4', 1, 'w1');
    await attempt('j4', 2, 'w1');
    const points = Array.from({ length: 5 }, (_, i) => point(i, { x: i }));
    await recordMetrics(db, { jobId: 'j4', attempt: 1, workerId: 'w1' }, points);
    await recordMetrics(db, { jobId: 'j4', attempt: 2, workerId: 'w1' }, [point(0, { x: 10 })]);
    const first = await listMetricPoints(db, 'j4', { limit: 4 });
    const rest = await listMetricPoints(db, 'j4', { limit: 4, after: first.at(-1)!.seq });
    expect([...first, ...rest].map((p) => p.values.x)).toEqual([0, 1, 2, 3, 4, 10]);
    const second = await listMetricPoints(db, 'j4', { limit: 10, attempt: 2 });
    expect(second.map((p) => [p.attempt, p.values.x])).toEqual([[2, 10]]);
    expect(await summarizeMetrics(db, 'none')).toEqual([]);
  });
});
