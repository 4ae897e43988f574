import { z } from 'zod';
import { MAX_NODES } from '@trainyard/events';
import { loadJob } from '@trainyard/application';
import { BlobKeys, getWritten } from '@trainyard/blobs';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import type { AttemptHeader, LogEnd } from '../log-events.ts';
import { jobLog } from '../logs.ts';
import { errorResponses, EventViewSchema, IdParamsSchema, OutputViewSchema } from '../schemas.ts';
import { listAttempts, type AttemptRow, type JobRow } from '@trainyard/projections';
import type { Caller } from '../auth.ts';
import { callerOf, jobIdParam, readModel, visibleJobHistory, visibleJobRow } from './common.ts';
import { LOG_EVENTS, LOG_RESPONSE, LogQuery, sendLog, streamed } from './send-log.ts';

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

/**
 * The attempt whose outputs a job shows, and the worker that keeps them: the one that held it.
 * A row projected before the attempt was recorded names none: the log says.
 */
async function outputsWriter(
  deps: ApiDeps,
  job: JobRow,
): Promise<{ attemptId: string | null; workerId: string | null }> {
  if (job.outputs_attempt_id === null) {
    const { state } = await loadJob(deps.bus.store, job.id);
    return { attemptId: state.outputsAttemptId, workerId: state.outputsWorkerId };
  }
  const attempts = await readModel(() => listAttempts(deps.db, job.id));
  const workerId = attempts.find((a) => a.id === job.outputs_attempt_id)?.worker_id ?? null;
  return { attemptId: job.outputs_attempt_id, workerId };
}

/** A job's row and attempts, once the read model holds the job's last event. */
async function jobAndAttempts(deps: ApiDeps, caller: Caller, id: string) {
  const job = await visibleJobRow(deps, caller, id);
  return { job, attempts: await readModel(() => listAttempts(deps.db, id)) };
}

function headerOf(attempts: AttemptRow[], attempt: number, rank: number): AttemptHeader {
  const a = attempts.find((x) => x.number === attempt);
  const member = rank === 0 ? a && { workerId: a.worker_id, gpus: a.gpus } : a?.members[rank - 1];
  return {
    attempt,
    build: attempt === 0,
    workerId: member?.workerId ?? null,
    gpus: member?.gpus ?? [],
  };
}

/** A job's log query: a gang's member may be named. */
const JobLogQuery = LogQuery.extend({
  rank: z.coerce
    .number()
    .int()
    .min(1)
    .max(MAX_NODES - 1)
    .optional()
    .describe("a gang job's: the log of its member of this rank (rank 0's is the job's)"),
});

function endOf(job: JobRow, attempts: AttemptRow[]): LogEnd {
  return {
    status: job.status,
    ended: TERMINAL.has(job.status),
    exitCode: attempts.at(-1)?.exit_code ?? null,
    failure: job.failure,
  };
}

/** A job's event history, logs and outputs. */
export function jobDataRoutes(app: Api, deps: ApiDeps): void {
  app.get(
    '/v1/jobs/:id/events',
    {
      schema: {
        tags: ['jobs'],
        summary: "The job's events, hash-chained: its audit trail, read from the log",
        params: IdParamsSchema,
        response: { 200: z.array(EventViewSchema), ...errorResponses(401, 404, 503) },
      },
    },
    async (req) => {
      const id = jobIdParam(req);
      const { events } = await visibleJobHistory(deps, callerOf(req), id);
      return events.map((e) => ({
        id: e.id,
        type: e.type,
        seq: e.seq,
        occurredAt: e.occurredAt,
        actor: e.actor,
        correlationId: e.correlationId,
        prevHash: e.prevHash,
        hash: e.hash,
        data: e.data,
      }));
    },
  );

  app.get(
    '/v1/jobs/:id/logs',
    {
      schema: {
        tags: ['jobs'],
        summary: "The job's log",
        description: `Plain text by default. ${LOG_EVENTS} A gang job's members of rank 1 and on each have a log of their own (\`rank\`).`,
        params: IdParamsSchema,
        querystring: JobLogQuery,
        response: { 200: LOG_RESPONSE, ...errorResponses(400, 401, 404, 503) },
      },
    },
    async (req, reply) => {
      const id = jobIdParam(req);
      const caller = callerOf(req);
      const rank = req.query.rank ?? 0;
      const first = await jobAndAttempts(deps, caller, id);
      const { job } = first;
      let { attempts } = first;
      const nodes = job.nodes ?? 1;
      if (rank >= nodes) {
        throw new ApiError(
          'VALIDATION_FAILED',
          nodes === 1
            ? `rank: job ${id} is no gang job: its log is the job's`
            : `rank: job ${id} runs on ${nodes} workers, ranks 0 to ${nodes - 1}`,
        );
      }
      return sendLog(deps, req, reply, jobLog(deps.bus, id, rank), {
        header: async (attempt) => {
          if (attempt > 0 && !attempts.some((a) => a.number === attempt)) {
            ({ attempts } = await jobAndAttempts(deps, caller, id));
          }
          return headerOf(attempts, attempt, rank);
        },
        end: async () => {
          const now = await jobAndAttempts(deps, caller, id);
          return endOf(now.job, now.attempts);
        },
      });
    },
  );

  app.get(
    '/v1/jobs/:id/outputs',
    {
      schema: {
        tags: ['jobs'],
        summary: "The job's output files, with their sizes and sha256 digests",
        params: IdParamsSchema,
        response: { 200: z.array(OutputViewSchema), ...errorResponses(401, 404, 503) },
      },
    },
    async (req) => {
      const id = jobIdParam(req);
      const job = await visibleJobRow(deps, callerOf(req), id);
      return job.outputs.map((f) => ({ path: f.path, size: f.sizeBytes, sha256: f.sha256 }));
    },
  );

  app.get(
    '/v1/jobs/:id/outputs/*',
    {
      schema: {
        tags: ['jobs'],
        summary: 'One output file; its sha256 is in the x-sha256 header',
        params: IdParamsSchema.extend({ '*': z.string().describe('the file path') }),
        response: {
          200: {
            description: 'The bytes',
            content: { 'application/octet-stream': { schema: z.string() } },
          },
          ...errorResponses(401, 404, 503),
        },
      },
    },
    async (req, reply) => {
      const id = jobIdParam(req);
      const path = req.params['*'];
      const job = await visibleJobRow(deps, callerOf(req), id);
      const file = job.outputs.find((f) => f.path === path);
      if (!file) throw new ApiError('NOT_FOUND', `job ${id} has no output ${path}`);
      const { attemptId, workerId } = await outputsWriter(deps, job);
      // Outputs kept before each attempt's were its own are under the job's key.
      const blob =
        (attemptId &&
          (await getWritten(deps.blobs, workerId, BlobKeys.attemptOutput(id, attemptId, path)))) ||
        (await getWritten(deps.blobs, workerId, BlobKeys.output(id, path)));
      if (!blob) throw new ApiError('NOT_FOUND', `output ${path} is no longer stored`);
      return reply
        .type('application/octet-stream')
        .header('content-length', file.sizeBytes)
        .header('x-sha256', file.sha256)
        .send(streamed(blob));
    },
  );
}
