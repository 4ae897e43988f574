import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { initialJobState } from '@trainyard/domain';
import { EMPTY_HEAD, JobSpecSchema, type JobSpec } from '@trainyard/events';
import { newId, runJobCommand } from '@trainyard/platform';
import { findJob, listAttempts, listJobs } from '@trainyard/projections';
import type { ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { keepUpload, stageUpload, type StagedUpload } from '../upload.ts';
import { jobView } from '../views.ts';
import { actorOf, callerOf, jobIdParam, readModel, visibleJob, waitForSeq } from './common.ts';

function parseSpec(raw: unknown): JobSpec {
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch {
      throw new ApiError('VALIDATION_FAILED', 'spec: must be JSON');
    }
  }
  const result = JobSpecSchema.safeParse(value);
  if (!result.success) {
    const details = result.error.issues.map((i) => ({
      field: `spec.${i.path.join('.')}`,
      message: i.message,
    }));
    throw new ApiError(
      'VALIDATION_FAILED',
      `${details[0]!.field}: ${details[0]!.message}`,
      details,
    );
  }
  return result.data;
}

async function readSubmission(
  req: FastifyRequest,
): Promise<{ spec: JobSpec; staged?: StagedUpload }> {
  if (!req.isMultipart()) return { spec: parseSpec(req.body) };
  let spec: JobSpec | undefined;
  let staged: StagedUpload | undefined;
  try {
    for await (const part of req.parts()) {
      if (part.type === 'field' && part.fieldname === 'spec') spec = parseSpec(part.value);
      else if (part.type === 'file' && part.fieldname === 'code' && !staged)
        staged = await stageUpload(part.file);
      else {
        if (part.type === 'file') part.file.resume();
        throw new ApiError('VALIDATION_FAILED', `${part.fieldname}: unexpected field`);
      }
    }
    if (!spec) throw new ApiError('VALIDATION_FAILED', 'spec: required');
    return { spec, ...(staged && { staged }) };
  } catch (err) {
    await staged?.discard();
    throw err;
  }
}

const ListQuery = z.object({
  status: z.string().optional(),
  owner: z.string().optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  after: z.coerce.number().int().min(0).optional(),
});

const JobQuery = z.object({ after: z.coerce.number().int().min(0).optional() });

/** Submit, list, show and cancel jobs. */
export function jobRoutes(app: FastifyInstance, deps: ApiDeps): void {
  app.post('/v1/jobs', async (req, reply) => {
    const caller = callerOf(req);
    const { spec, staged } = await readSubmission(req);
    const jobId = newId('job');
    const code = staged ? await keepUpload(deps.blobs, jobId, staged) : undefined;
    const result = await runJobCommand(
      deps.bus.store,
      jobId,
      { type: 'SubmitJob', owner: caller.username, spec, ...(code && { code }) },
      { actor: actorOf(caller), now: new Date(), correlationId: req.id },
      { snapshot: { state: initialJobState(jobId), head: EMPTY_HEAD } },
    );
    deps.metrics.jobsSubmitted.inc();
    return reply.code(202).send({ id: jobId, status: result.state.status, seq: result.head.seq });
  });

  app.get('/v1/jobs', async (req) => {
    const caller = callerOf(req);
    const q = ListQuery.parse(req.query);
    if (q.after !== undefined) await waitForSeq(deps, q.after);
    const owner = caller.role === 'admin' ? q.owner : caller.username;
    const rows = await readModel(() =>
      listJobs(deps.db, {
        limit: q.limit,
        ...(owner && { owner }),
        ...(q.status && { status: q.status }),
      }),
    );
    return rows.map((r) => jobView(r));
  });

  app.get('/v1/jobs/:id', async (req) => {
    const caller = callerOf(req);
    const id = jobIdParam(req);
    const { after } = JobQuery.parse(req.query);
    if (after !== undefined) await waitForSeq(deps, after);
    const job = await readModel(() => findJob(deps.db, id));
    if (!job || (caller.role !== 'admin' && job.owner !== caller.username)) {
      throw new ApiError('NOT_FOUND', `job ${id} not found`);
    }
    const attempts = await readModel(() => listAttempts(deps.db, id));
    return jobView(job, attempts);
  });

  app.post('/v1/jobs/:id/cancel', async (req, reply) => {
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
      status: result.state.status,
      cancelRequested: result.state.cancelRequested,
      seq: result.head.seq,
    });
  });
}
