import { z } from 'zod';
import { initialJobState, jobNeed, refusedBase } from '@trainyard/domain';
import {
  EMPTY_HEAD,
  JobKindSchema,
  JobStatus,
  PrioritySchema,
  type JobSpec,
} from '@trainyard/events';
import { runJobCommand } from '@trainyard/application';
import { BlobKeys } from '@trainyard/blobs';
import { newId } from '@trainyard/service-kit';
import {
  countShardsByStatus,
  findJob,
  jobOwnersAndStatuses,
  listAttempts,
  listJobs,
} from '@trainyard/projections';
import type { Caller } from '../auth.ts';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import {
  AfterQuerySchema,
  errorResponses,
  IdParamsSchema,
  JobViewSchema,
  queryFlag,
} from '../schemas.ts';
import {
  CancelledSchema,
  PriorityChangedSchema,
  SubmitFormSchema,
  SubmitSpecSchema,
  SubmittedSchema,
} from '../submit-schemas.ts';
import { pendingFields, refuseUnsatisfiable } from '../queue.ts';
import { teamToCharge } from '../charge.ts';
import { keepUpload, readSubmission } from '../upload.ts';
import { jobView } from '../views.ts';
import {
  actorOf,
  callerOf,
  holdOf,
  jobIdParam,
  readModel,
  refuseTinyMemory,
  visibleJob,
  waitForSeq,
} from './common.ts';
import { refuseBadShape, refuseNul } from './job-shape.ts';

/** The most jobs one page of `GET /v1/jobs` holds. */
export const MAX_LIST_LIMIT = 500;

/**
 * The spec as this cluster runs it: a job that names no image gets the default one where jobs
 * run in containers. An image where no registry holds images, or a memory limit too small for
 * any job to start in, is refused.
 */
function withImagePolicy(spec: JobSpec, images: ApiDeps['images']): JobSpec {
  if (spec.image !== undefined && !images.enabled) {
    throw new ApiError(
      'VALIDATION_FAILED',
      'spec.image: this cluster runs jobs on its workers’ hosts, not in containers (it has no registry for images: start it with `up --runtime docker`, or set TRAINYARD_REGISTRY)',
    );
  }
  const refused = spec.image === undefined ? null : refusedBase(spec.image, images.registry);
  if (refused) throw new ApiError('VALIDATION_FAILED', `spec.image: ${refused}`);
  const image = spec.image ?? images.defaultImage;
  refuseTinyMemory(spec.resources.memoryGb, 'spec.resources.memoryGb');
  return image === undefined ? spec : { ...spec, image };
}

/**
 * The jobs a spec depends on must be the caller's to see, and not already failed or cancelled: a
 * job after one of those would never run. They are read from the projection in one query; a job
 * it does not hold yet (submitted a moment ago) is read from the log.
 */
async function checkDependencies(deps: ApiDeps, caller: Caller, spec: JobSpec): Promise<void> {
  const ids = spec.dependsOn ?? [];
  if (ids.length === 0) return;
  const projected = await jobOwnersAndStatuses(deps.db, ids).catch(() => []);
  const known = new Map(projected.map((j) => [j.id, j]));
  const jobs = await Promise.all(
    ids.map(async (id) => {
      const row = known.get(id);
      if (row) return row;
      const { state } = await visibleJob(deps, caller, id).catch((err: unknown) => {
        if (err instanceof ApiError && err.code === 'NOT_FOUND') return { state: null };
        throw err;
      });
      return { id, owner: state?.owner ?? '', status: state?.status ?? 'none' };
    }),
  );
  for (const [i, { id, owner, status }] of jobs.entries()) {
    if (status === 'none' || (caller.role !== 'admin' && owner !== caller.username))
      throw new ApiError('VALIDATION_FAILED', `spec.dependsOn.${i}: job ${id} not found`);
    if (status === 'failed' || status === 'cancelled') {
      throw new ApiError(
        'VALIDATION_FAILED',
        `spec.dependsOn.${i}: job ${id} ${status}; a job that depends on it would never run`,
      );
    }
  }
}

/** The statuses of a job that waits to be placed, or to be queued. */
const WAITING = new Set<string>(['submitted', 'building', 'estimating', 'queued', 'retrying']);

const SubmitQuery = z.object({
  dryRun: queryFlag('check a JSON spec and answer 200 without submitting anything'),
  hold: queryFlag('submit it held: it is not placed until released (POST /v1/jobs/{id}/release)'),
});

const ListQuery = z.object({
  status: z.enum(Object.values(JobStatus)).optional(),
  kind: JobKindSchema.optional().describe('only jobs of this kind: `job` or `service`'),
  owner: z.string().optional().describe("admins: only this user's jobs"),
  limit: z.coerce.number().int().min(1).max(MAX_LIST_LIMIT).default(50),
  cursor: z
    .string()
    .optional()
    .describe('the x-next-cursor header of the previous page: the jobs after it'),
  after: AfterQuerySchema.shape.after,
});

/** A page's place in the list, newest first: the last job's creation time and id. */
function encodeCursor(job: { created_at: Date; id: string }): string {
  return Buffer.from(`${job.created_at.toISOString()}|${job.id}`).toString('base64url');
}

function decodeCursor(cursor: string): { createdAt: Date; id: string } {
  const [at, id] = Buffer.from(cursor, 'base64url').toString().split('|');
  const createdAt = new Date(at ?? '');
  if (!id || Number.isNaN(createdAt.getTime()))
    throw new ApiError('VALIDATION_FAILED', 'query.cursor: not a cursor this API gave out');
  return { createdAt, id };
}

const priorityForbidden = () =>
  new ApiError(
    'FORBIDDEN',
    'a priority above 0 needs an admin; you may lower your own jobs (down to -1000)',
  );

const PriorityPatchSchema = z
  .object({ priority: PrioritySchema.describe('the new priority; above 0 needs an admin') })
  .strict();

/** Submit, list, show, change and cancel jobs. */
export function jobRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/jobs',
    {
      schema: {
        tags: ['jobs'],
        summary: 'Submit a job',
        description:
          'Multipart with a `spec` field (JSON) and a `code` file (.tar.gz or .zip), or a JSON spec alone. Answers at once; the job goes on through its statuses.',
        querystring: SubmitQuery,
        body: {
          content: {
            'application/json': { schema: SubmitSpecSchema },
            'multipart/form-data': { schema: SubmitFormSchema },
          },
        },
        response: {
          202: SubmittedSchema,
          200: z.object({ valid: z.literal(true) }).describe('dryRun: the spec would be taken'),
          ...errorResponses(400, 401, 403, 413, 415, 503),
        },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const submitted = await readSubmission(req, deps.archiveLimits, SubmitSpecSchema);
      const { staged } = submitted;
      let spec: JobSpec;
      let team: string | undefined;
      try {
        spec = withImagePolicy(submitted.spec, deps.images);
        refuseBadShape(spec);
        refuseNul(spec);
        if (spec.priority > 0 && caller.role !== 'admin') throw priorityForbidden();
        await checkDependencies(deps, caller, spec);
        await refuseUnsatisfiable(deps, jobNeed(spec));
        team = await teamToCharge(deps, caller.username, spec.team);
      } catch (err) {
        await staged?.discard();
        throw err;
      }
      if (req.query.dryRun) {
        await staged?.discard();
        return reply.code(200).send({ valid: true as const });
      }
      const jobId = newId('job');
      const code = staged ? await keepUpload(deps.blobs, BlobKeys.code(jobId), staged) : undefined;
      const result = await runJobCommand(
        deps.bus.store,
        jobId,
        {
          type: 'SubmitJob',
          owner: caller.username,
          spec,
          ...(code && { code }),
          ...(req.query.hold && { hold: holdOf(caller) }),
          ...(team !== undefined && { team }),
        },
        { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        { snapshot: { state: initialJobState(jobId), head: EMPTY_HEAD } },
      );
      deps.metrics.jobsSubmitted.inc();
      return reply.code(202).send({
        id: jobId,
        status: result.state.status as JobStatus,
        seq: result.head.seq,
      });
    },
  );

  app.get(
    '/v1/jobs',
    {
      schema: {
        tags: ['jobs'],
        summary: "List your jobs (admins: everyone's), newest first",
        description:
          'A page of at most `limit` jobs; when more follow, the `x-next-cursor` header holds the `cursor` of the next page.',
        querystring: ListQuery,
        response: { 200: z.array(JobViewSchema), ...errorResponses(400, 401, 503, 504) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const q = req.query;
      if (q.after !== undefined) await waitForSeq(deps, q.after);
      const owner = caller.role === 'admin' ? q.owner : caller.username;
      const before = q.cursor ? decodeCursor(q.cursor) : undefined;
      const rows = await readModel(() =>
        listJobs(deps.db, {
          limit: q.limit,
          ...(owner && { owner }),
          ...(q.status && { status: q.status }),
          ...(q.kind && { kind: q.kind }),
          ...(before && { before }),
        }),
      );
      const last = rows.at(-1);
      if (last && rows.length === q.limit) reply.header('x-next-cursor', encodeCursor(last));
      return rows.map((r) => jobView(r));
    },
  );

  app.get(
    '/v1/jobs/:id',
    {
      schema: {
        tags: ['jobs'],
        summary: 'A job with its attempts',
        params: IdParamsSchema,
        querystring: AfterQuerySchema,
        response: { 200: JobViewSchema, ...errorResponses(401, 404, 503, 504) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const id = jobIdParam(req);
      const { after } = req.query;
      if (after !== undefined) await waitForSeq(deps, after);
      const job = await readModel(() => findJob(deps.db, id));
      if (!job || (caller.role !== 'admin' && job.owner !== caller.username)) {
        throw new ApiError('NOT_FOUND', `job ${id} not found`);
      }
      const attempts = await readModel(() => listAttempts(deps.db, id));
      const shardStatuses =
        job.shards === null ? undefined : await readModel(() => countShardsByStatus(deps.db, id));
      return {
        ...jobView(job, attempts),
        ...(shardStatuses && { shardStatuses }),
        ...(await pendingFields(deps, id, WAITING.has(job.status))),
      };
    },
  );

  app.post(
    '/v1/jobs/:id/cancel',
    {
      schema: {
        tags: ['jobs'],
        summary: 'Cancel a job',
        params: IdParamsSchema,
        response: { 202: CancelledSchema, ...errorResponses(401, 404, 409, 503) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const id = jobIdParam(req);
      const snapshot = await visibleJob(deps, caller, id);
      const result = await runJobCommand(
        deps.bus.store,
        id,
        { type: 'CancelJob' },
        { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        { snapshot },
      );
      return reply.code(202).send({
        id,
        status: result.state.status as JobStatus,
        cancelRequested: result.state.cancelRequested,
        seq: result.head.seq,
      });
    },
  );

  app.patch(
    '/v1/jobs/:id',
    {
      schema: {
        tags: ['jobs'],
        summary: "Change a job's priority while it waits or runs",
        description:
          'Its owner may lower it, or set any value up to 0; above 0 needs an admin. Placement ages priority by the wait (`docs/architecture.md`). An array job’s shards take its priority; a shard’s own is refused (409).',
        params: IdParamsSchema,
        body: PriorityPatchSchema,
        response: { 200: PriorityChangedSchema, ...errorResponses(400, 401, 403, 404, 409, 503) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const id = jobIdParam(req);
      const { priority } = req.body;
      const snapshot = await visibleJob(deps, caller, id);
      const shardOf = snapshot.state.shardOf;
      if (shardOf) {
        throw new ApiError(
          'INVALID_TRANSITION',
          `job ${id} is shard ${shardOf.index} of array job ${shardOf.jobId}, whose priority its shards take: change that one's`,
        );
      }
      if (priority > 0 && caller.role !== 'admin') throw priorityForbidden();
      const result = await runJobCommand(
        deps.bus.store,
        id,
        { type: 'ChangePriority', priority },
        { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        { snapshot },
      );
      return {
        id,
        status: result.state.status as JobStatus,
        priority: result.state.spec?.priority ?? priority,
        seq: result.head.seq,
      };
    },
  );
}
