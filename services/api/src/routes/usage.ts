import { z } from 'zod';
import { gpuUsage } from '@trainyard/projections';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { errorResponses, isoTime } from '../schemas.ts';
import { gpuHours } from '../views.ts';
import { callerOf, readModel } from './common.ts';

const DAY_MS = 86_400_000;
/** The jobs one answer lists at most: those that used most. */
const JOBS_LISTED = 500;

const UsageQuery = z.object({
  from: z.iso
    .datetime()
    .optional()
    .describe('the start of the window (default: 30 days before `to`)'),
  to: z.iso.datetime().optional().describe('the end of the window (default: now)'),
  user: z.string().optional().describe("admins: one user's usage; anyone else sees their own"),
});

const UsageSchema = z
  .object({
    from: isoTime,
    to: isoTime,
    users: z.array(
      z.object({
        user: z.string(),
        gpuHours: z.number(),
        jobs: z.number().int(),
        attempts: z.number().int(),
      }),
    ),
    jobs: z
      .array(
        z.object({
          id: z.string(),
          name: z.string(),
          owner: z.string(),
          gpuHours: z.number(),
          attempts: z.number().int(),
        }),
      )
      .describe(`the ${JOBS_LISTED} jobs that used most`),
  })
  .meta({ id: 'Usage' });

/** GPU-hours held (GPUs x time held, from assignment to the end), per user and per job. */
export function usageRoutes(app: Api, deps: ApiDeps): void {
  app.get(
    '/v1/usage',
    {
      schema: {
        tags: ['usage'],
        summary: 'GPU-hours held in a window, per user and per job',
        description:
          'Each attempt holds its GPUs from its assignment to its end (or now); the part of that inside the window counts, times its GPUs.',
        querystring: UsageQuery,
        response: { 200: UsageSchema, ...errorResponses(400, 401, 403, 503, 504) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const q = req.query;
      const to = q.to ? new Date(q.to) : new Date();
      const from = q.from ? new Date(q.from) : new Date(to.getTime() - 30 * DAY_MS);
      if (from >= to) throw new ApiError('VALIDATION_FAILED', 'query.from: must come before `to`');
      if (q.user !== undefined && q.user !== caller.username && caller.role !== 'admin')
        throw new ApiError('FORBIDDEN', 'only an admin sees another user’s usage');
      const owner = caller.role === 'admin' ? q.user : caller.username;
      const usage = await readModel(() =>
        gpuUsage(deps.db, {
          from,
          to,
          ...(owner !== undefined && { owner }),
          jobLimit: JOBS_LISTED,
        }),
      );
      return {
        from: from.toISOString(),
        to: to.toISOString(),
        users: usage.users.map((u) => ({
          user: u.owner,
          gpuHours: gpuHours(u.gpuSeconds),
          jobs: u.jobs,
          attempts: u.attempts,
        })),
        jobs: usage.jobs.map((j) => ({
          id: j.jobId,
          name: j.name,
          owner: j.owner,
          gpuHours: gpuHours(j.gpuSeconds),
          attempts: j.attempts,
        })),
      };
    },
  );
}
