import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { runJobCommand } from '@trainyard/application';
import type { JobCommand } from '@trainyard/domain';
import { HoldBy, type JobStatus } from '@trainyard/events';
import type { Api, ApiDeps } from '../deps.ts';
import { errorResponses, HIDDEN_CHARACTERS, IdParamsSchema } from '../schemas.ts';
import { SubmittedSchema } from '../submit-schemas.ts';
import { actorOf, callerOf, holdOf, jobIdParam, visibleJob } from './common.ts';

const HoldBody = z
  .object({
    reason: z
      .string()
      .max(512)
      .refine((r) => !HIDDEN_CHARACTERS.test(r), {
        message: 'control and bidirectional characters are not allowed in a reason',
      })
      .default('')
      .describe('why, shown with the job'),
  })
  .strict();

const HoldSchema = SubmittedSchema.extend({
  held: z.object({ by: HoldBy, reason: z.string() }).nullable(),
});

/** Hold a waiting job back from placement, and release it (like Slurm's `hold` and `release`). */
export function jobHoldRoutes(app: Api, deps: ApiDeps): void {
  /** Runs a hold or a release, as the caller's, on a job they may see; the job's hold after. */
  const holdCommand = async (
    req: FastifyRequest,
    command: (by: HoldBy) => JobCommand,
  ): Promise<z.infer<typeof HoldSchema>> => {
    const caller = callerOf(req);
    const id = jobIdParam(req);
    const snapshot = await visibleJob(deps, caller, id);
    const result = await runJobCommand(
      deps.bus.store,
      id,
      command(holdOf(caller)),
      { actor: actorOf(caller), now: new Date(), correlationId: req.id },
      { snapshot },
    );
    return {
      id,
      status: result.state.status as JobStatus,
      held: result.state.held,
      seq: result.head.seq,
    };
  };

  app.post(
    '/v1/jobs/:id/hold',
    {
      schema: {
        tags: ['jobs'],
        summary: 'Hold a waiting job: it is not placed until released',
        description:
          'A job that waits (submitted, building, estimating, queued or retrying) may be held by its owner or an admin; it may still be built, and a probe already running finishes. One that runs answers 409: cancel it instead; so does an array job once its shards may be submitted (built, its dependencies met): hold its shards. A hold an admin puts on a job only an admin releases.',
        params: IdParamsSchema,
        body: HoldBody.optional(),
        response: { 200: HoldSchema, ...errorResponses(400, 401, 404, 409, 503) },
      },
    },
    (req) => holdCommand(req, (by) => ({ type: 'HoldJob', by, reason: req.body?.reason ?? '' })),
  );

  app.post(
    '/v1/jobs/:id/release',
    {
      schema: {
        tags: ['jobs'],
        summary: 'Release a held job: it queues again, behind what queued meanwhile',
        description:
          'Its owner releases their own hold; a hold an admin put on the job answers 403 (`HELD_BY_ADMIN`) unless an admin releases it. Releasing a job that is not held changes nothing.',
        params: IdParamsSchema,
        response: { 200: HoldSchema, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    (req) => holdCommand(req, (by) => ({ type: 'ReleaseJob', by })),
  );
}
