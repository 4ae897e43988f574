import { z } from 'zod';
import { HolderSchema, QueueEntrySchema, TEAM_NAME, TeamHoldingSchema } from '@trainyard/events';
import { teamRole } from '../charge.ts';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { queueOrUnavailable } from '../queue.ts';
import { errorResponses, IdParamsSchema, isoTime, queryFlag } from '../schemas.ts';
import { callerOf, jobIdParam, visibleJobRow } from './common.ts';

const QueueQuery = z.object({
  all: queryFlag("admins: every user's entries, and who holds what"),
  team: z
    .string()
    .regex(TEAM_NAME, 'a team name')
    .optional()
    .describe('admins and the team’s leads: the entries charged to this team, and what it holds'),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

const QueueSchema = z
  .object({
    seq: z.number().int().describe('the log sequence the scheduler’s state held when it answered'),
    at: isoTime,
    total: z.number().int().describe('how many entries wait, every user’s'),
    positioned: z
      .number()
      .int()
      .optional()
      .describe('how many of them may be placed now: the positions run from 1 to this'),
    entries: z.array(QueueEntrySchema.meta({ id: 'QueueEntry' })),
    teams: z
      .array(TeamHoldingSchema)
      .optional()
      .describe('what teams hold, against their quotas: every team with all=true, or the team'),
    holders: z
      .array(HolderSchema)
      .optional()
      .describe(
        'what running jobs and sessions hold, with the quota (maxGpus): each user’s with all=true, else yours',
      ),
  })
  .meta({ id: 'Queue' });

const ExplainSchema = z
  .object({
    id: z.string(),
    status: z.string(),
    entry: QueueEntrySchema.nullable().describe('where it stands in the queue, while it waits'),
    message: z.string(),
  })
  .meta({ id: 'Explanation' });

/** The queue as the leading scheduler sees it, and why a job waits. */
export function queueRoutes(app: Api, deps: ApiDeps): void {
  app.get(
    '/v1/queue',
    {
      schema: {
        tags: ['jobs'],
        summary: 'The queue in placement order, with why each entry waits',
        description:
          'Your jobs and sessions that wait, in the order the scheduler places them (`position`), then those that wait for something other than room (held jobs, retries, dependencies, builds), and what your running work holds against your GPU quota. Admins see everyone’s with `all=true`, and what each user holds.',
        querystring: QueueQuery,
        response: { 200: QueueSchema, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const { all, team, limit } = req.query;
      if (all && caller.role !== 'admin') {
        throw new ApiError('FORBIDDEN', 'only admins see everyone’s queue (all=true)');
      }
      if (all && team !== undefined)
        throw new ApiError('VALIDATION_FAILED', 'all and team: ask for one or the other');
      if (
        team !== undefined &&
        caller.role !== 'admin' &&
        (await teamRole(deps, caller.username, team)) !== 'lead'
      ) {
        throw new ApiError('FORBIDDEN', 'only admins and a team’s leads see its queue');
      }
      return queueOrUnavailable(deps, {
        op: 'list',
        limit,
        ...(team !== undefined ? { team } : !all && { owner: caller.username }),
      });
    },
  );

  app.get(
    '/v1/jobs/:id/explain',
    {
      schema: {
        tags: ['jobs'],
        summary: 'Why a job waits, from the scheduler',
        params: IdParamsSchema,
        response: { 200: ExplainSchema, ...errorResponses(401, 404, 503, 504) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const id = jobIdParam(req);
      const job = await visibleJobRow(deps, caller, id);
      const reply = await queueOrUnavailable(deps, { op: 'explain', id });
      const entry = reply.entries[0] ?? null;
      return {
        id,
        status: entry?.status ?? job.status,
        entry,
        message: entry
          ? `${entry.position === null ? '' : `#${entry.position} of ${reply.positioned ?? reply.total} in the queue: `}${entry.message}`
          : `it does not wait: it is ${job.status}`,
      };
    },
  );
}
