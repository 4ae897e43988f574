import { sql, type Kysely, type Transaction } from 'kysely';
import type { MetricPoint, MetricSummary } from '@trainyard/events';
import type { Database } from './database.ts';

/** Where a batch of points came from: its subject names the job, the attempt and the worker. */
export interface MetricsOrigin {
  jobId: string;
  attempt: number;
  workerId: string;
}

/** Serialises the writers of `job_metrics`, so that points commit in the order of their `seq`. */
const METRICS_LOCK = 7_261_002;

/**
 * Keeps a batch of points; one kept before (the same source and place) is left as it is. Batches
 * are written one at a time, so that a reader paging by `seq` never passes over a point that
 * commits later with a smaller one.
 */
export async function recordMetrics(
  db: Kysely<Database>,
  origin: MetricsOrigin,
  points: readonly MetricPoint[],
): Promise<void> {
  if (points.length === 0) return;
  await db.transaction().execute(async (trx) => {
    await sql`select pg_advisory_xact_lock(${METRICS_LOCK})`.execute(trx);
    await insertPoints(trx, origin, points);
  });
}

function insertPoints(
  db: Transaction<Database>,
  origin: MetricsOrigin,
  points: readonly MetricPoint[],
) {
  return db
    .insertInto('job_metrics')
    .values(
      points.map((p) => ({
        job_id: origin.jobId,
        attempt: origin.attempt,
        worker_id: origin.workerId,
        source: p.source,
        offset: p.offset,
        at: new Date(p.at),
        step: p.step,
        epoch: p.epoch,
        values: sql<string>`${JSON.stringify(p.values)}::text::jsonb` as unknown as string,
      })),
    )
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** Whose points: one job's, or those of every shard of an array job. */
type MetricsScope = { jobId: string } | { shardsOf: string };

/**
 * The points that count of a job (or of an array job's shards): those of its attempts (probes
 * aside) read by the worker that held each one. A worker may publish only under its own name, so
 * one cannot speak for another's.
 */
const countedPoints = (db: Kysely<Database>, scope: MetricsScope) => {
  const points = db
    .selectFrom('job_metrics as m')
    .innerJoin('attempts as a', (join) =>
      join
        .onRef('a.job_id', '=', 'm.job_id')
        .onRef('a.number', '=', 'm.attempt')
        .onRef('a.worker_id', '=', 'm.worker_id'),
    )
    .where('a.probe', '=', false);
  return 'jobId' in scope
    ? points.where('m.job_id', '=', scope.jobId)
    : points.where('m.job_id', 'in', (eb) =>
        eb.selectFrom('jobs').select('id').where('shard_of', '=', scope.shardsOf),
      );
};

/**
 * What a job's metrics add up to, per name: the newest value (of the latest attempt), the least
 * and the greatest, and the mean over the points of the greatest epoch reported (over all of them
 * where none names an epoch).
 */
export async function summarizeMetrics(
  db: Kysely<Database>,
  jobId: string,
): Promise<MetricSummary[]> {
  return (await summaries(db, { jobId }, false)).map(({ jobId: _jobId, ...summary }) => summary);
}

/**
 * The summary of each shard of an array job that reported metrics, by the shard's id, in shard
 * order (the ids share their array job's, so the shorter index comes first).
 */
export async function summarizeShardMetrics(
  db: Kysely<Database>,
  arrayJobId: string,
): Promise<Map<string, MetricSummary[]>> {
  const byShard = new Map<string, MetricSummary[]>();
  for (const { jobId, ...summary } of await summaries(db, { shardsOf: arrayJobId }, true)) {
    let list = byShard.get(jobId);
    if (!list) byShard.set(jobId, (list = []));
    list.push(summary);
  }
  return byShard;
}

/**
 * What an array job's metrics add up to, per name, from each shard's summary: the points of all
 * of them, the least and the greatest, and as `last` and `finalEpochMean` the mean across shards
 * of each shard's own (its newest value, the mean of its own final epoch); `finalEpoch` is the
 * greatest any shard reached.
 */
export function combineShardSummaries(byShard: Map<string, MetricSummary[]>): MetricSummary[] {
  const byName = new Map<string, MetricSummary[]>();
  for (const summaries of byShard.values()) {
    for (const s of summaries) {
      let list = byName.get(s.name);
      if (!list) byName.set(s.name, (list = []));
      list.push(s);
    }
  }
  const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;
  return [...byName.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, list]) => {
      const epochs = list.flatMap((s) => (s.finalEpoch === null ? [] : [s.finalEpoch]));
      return {
        name,
        count: list.reduce((sum, s) => sum + s.count, 0),
        last: mean(list.map((s) => s.last)),
        min: Math.min(...list.map((s) => s.min)),
        max: Math.max(...list.map((s) => s.max)),
        finalEpoch: epochs.length > 0 ? Math.max(...epochs) : null,
        finalEpochMean: mean(list.map((s) => s.finalEpochMean)),
      };
    });
}

async function summaries(
  db: Kysely<Database>,
  scope: MetricsScope,
  perJob: boolean,
): Promise<(MetricSummary & { jobId: string })[]> {
  const points = countedPoints(db, scope).select([
    (perJob ? sql<string>`m.job_id` : sql<string>`''::text`).as('g'),
    'm.attempt',
    'm.at',
    'm.seq',
    'm.epoch',
    sql<string>`e.key`.as('name'),
    sql<number>`e.value::float8`.as('v'),
    sql<string>`e.value::numeric`.as('n'),
  ]);
  const { rows } = await sql<{
    job_id: string;
    name: string;
    count: number;
    last: number;
    min: number;
    max: number;
    final_epoch: number | null;
    final_epoch_mean: number;
  }>`
    with kv as (${points.innerJoinLateral(sql`jsonb_each(m.values)`.as('e'), (j) => j.onTrue())}),
    final as (select g, name, max(epoch) as final_epoch from kv group by g, name)
    select kv.g as job_id, kv.name, count(*)::int as count, min(v) as min, max(v) as max,
      (array_agg(v order by kv.attempt desc, kv.at desc, kv.seq desc))[1] as last,
      final.final_epoch,
      avg(n) filter (where kv.epoch is not distinct from final.final_epoch)::float8
        as final_epoch_mean
    from kv join final on final.g = kv.g and final.name = kv.name
    group by kv.g, kv.name, final.final_epoch
    order by length(kv.g), kv.g, kv.name`.execute(db);
  return rows.map((r) => ({
    jobId: r.job_id,
    name: r.name,
    count: r.count,
    last: r.last,
    min: r.min,
    max: r.max,
    finalEpoch: r.final_epoch,
    finalEpochMean: r.final_epoch_mean,
  }));
}

/** One point as the API gives it. */
export interface MetricPointView {
  /** Where it is in the order points arrived: read on after it with `after`. */
  seq: string;
  attempt: number;
  source: string;
  at: Date;
  step: number | null;
  epoch: number | null;
  values: Record<string, number>;
}

/** A job's points that count, in the order they arrived, after `after` (a `seq`). */
export async function listMetricPoints(
  db: Kysely<Database>,
  jobId: string,
  q: { after?: string; limit: number; attempt?: number },
): Promise<MetricPointView[]> {
  if (q.limit === 0) return [];
  let query = countedPoints(db, { jobId }).select([
    sql<string>`m.seq::text`.as('seq'),
    'm.attempt',
    'm.source',
    'm.at',
    'm.step',
    'm.epoch',
    'm.values',
  ]);
  if (q.after !== undefined) query = query.where('m.seq', '>', q.after);
  if (q.attempt !== undefined) query = query.where('m.attempt', '=', q.attempt);
  return query.orderBy('m.seq').limit(q.limit).execute();
}
