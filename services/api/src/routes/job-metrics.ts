import { z } from 'zod';
import {
  combineShardSummaries,
  listMetricPoints,
  summarizeMetrics,
  summarizeShardMetrics,
} from '@trainyard/projections';
import type { Api, ApiDeps } from '../deps.ts';
import { errorResponses, IdParamsSchema, isoTime } from '../schemas.ts';
import { callerOf, jobIdParam, readModel, visibleJobRow } from './common.ts';

const MetricsQuery = z.object({
  after: z
    .string()
    .regex(/^\d{1,18}$/, 'a point’s seq')
    .optional()
    .describe('only points that arrived after this one (the `next` of the page before)'),
  limit: z.coerce.number().int().min(0).max(5000).default(1000).describe('points per page'),
  attempt: z.coerce.number().int().min(1).max(1_000_000).optional().describe('one attempt only'),
});

const SummarySchema = z
  .object({
    name: z.string(),
    count: z.number().int(),
    last: z.number().describe('the newest value, of the latest attempt that reported it'),
    min: z.number(),
    max: z.number(),
    finalEpoch: z.number().int().nullable().describe('the greatest epoch reported; null if none'),
    finalEpochMean: z
      .number()
      .describe('the mean over the points of the final epoch (of all points where none is named)'),
  })
  .meta({ id: 'MetricSummary' });

const PointSchema = z
  .object({
    seq: z.string(),
    attempt: z.number().int(),
    source: z.enum(['output', 'file']),
    at: isoTime,
    step: z.number().int().nullable(),
    epoch: z.number().int().nullable(),
    values: z.record(z.string(), z.number()),
  })
  .meta({ id: 'MetricPoint' });

const MetricsSchema = z
  .object({
    jobId: z.string(),
    summary: z
      .array(SummarySchema)
      .describe(
        'of an array job: over all its shards; `last` and `finalEpochMean` are the means across shards of each shard’s own',
      ),
    shards: z
      .array(z.object({ jobId: z.string(), summary: z.array(SummarySchema) }))
      .optional()
      .describe('only for an array job: the summary of each shard that reported, in shard order'),
    points: z.array(PointSchema).describe('an array job has none: each shard’s are under its id'),
    next: z.string().nullable().describe('pass as `after` for the next page; null at the end'),
  })
  .meta({ id: 'JobMetrics' });

/** A job's training metrics: what they add up to, and each point, page by page. */
export function jobMetricsRoutes(app: Api, deps: ApiDeps): void {
  app.get(
    '/v1/jobs/:id/metrics',
    {
      schema: {
        tags: ['jobs'],
        summary: 'A job’s training metrics',
        description:
          'The points a job reported (`TRAINYARD_METRIC {json}` lines in its output, or JSON lines in `$TRAINYARD_METRICS_FILE`), in the order they arrived, and per metric its last value, its least and greatest, and its mean over the final epoch. Probes are left out. For an array job: the summary over all its shards’ points and each shard’s own (`shards`); the points are under each shard’s id.',
        params: IdParamsSchema,
        querystring: MetricsQuery,
        response: { 200: MetricsSchema, ...errorResponses(400, 401, 404, 503) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const id = jobIdParam(req);
      const job = await visibleJobRow(deps, caller, id);
      const { after, limit, attempt } = req.query;
      if (job.shards !== null) {
        const byShard = await readModel(() => summarizeShardMetrics(deps.db, id));
        const summary = combineShardSummaries(byShard);
        const shards = [...byShard].map(([jobId, summary]) => ({ jobId, summary }));
        return { jobId: id, summary, shards, points: [], next: null };
      }
      const [summary, points] = await readModel(() =>
        Promise.all([
          summarizeMetrics(deps.db, id),
          listMetricPoints(deps.db, id, {
            limit,
            ...(after !== undefined && { after }),
            ...(attempt !== undefined && { attempt }),
          }),
        ]),
      );
      return {
        jobId: id,
        summary,
        points: points.map((p) => ({
          seq: p.seq,
          attempt: p.attempt,
          source: p.source as 'output' | 'file',
          at: p.at.toISOString(),
          step: p.step,
          epoch: p.epoch,
          values: p.values,
        })),
        next: points.length === limit && limit > 0 ? points[points.length - 1]!.seq : null,
      };
    },
  );
}
