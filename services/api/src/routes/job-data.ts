import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { BlobKeys } from '@trainyard/platform';
import type { ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { openLog } from '../logs.ts';
import { callerOf, jobIdParam, visibleJob, visibleJobHistory } from './common.ts';

const LogQuery = z.object({
  follow: z
    .enum(['true', 'false', '1', '0'])
    .optional()
    .transform((v) => v === 'true' || v === '1'),
});

/** A job's event history, logs and outputs. */
export function jobDataRoutes(app: FastifyInstance, deps: ApiDeps): void {
  app.get('/v1/jobs/:id/events', async (req) => {
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
  });

  app.get('/v1/jobs/:id/logs', async (req, reply) => {
    const id = jobIdParam(req);
    await visibleJob(deps, callerOf(req), id);
    const { follow } = LogQuery.parse(req.query);
    const abort = new AbortController();
    req.raw.on('close', () => abort.abort());
    const stream = await openLog(deps.bus, deps.blobs, id, { follow, signal: abort.signal });
    return reply.type('text/plain; charset=utf-8').header('cache-control', 'no-store').send(stream);
  });

  app.get('/v1/jobs/:id/outputs', async (req) => {
    const id = jobIdParam(req);
    const { state } = await visibleJob(deps, callerOf(req), id);
    return state.outputs.map((f) => ({ path: f.path, size: f.sizeBytes, sha256: f.sha256 }));
  });

  app.get('/v1/jobs/:id/outputs/*', async (req, reply) => {
    const id = jobIdParam(req);
    const path = (req.params as { '*': string })['*'];
    const { state } = await visibleJob(deps, callerOf(req), id);
    const file = state.outputs.find((f) => f.path === path);
    if (!file) throw new ApiError('NOT_FOUND', `job ${id} has no output ${path}`);
    const blob = await deps.blobs.get(BlobKeys.output(id, path));
    if (!blob) throw new ApiError('NOT_FOUND', `output ${path} is no longer stored`);
    return reply
      .type('application/octet-stream')
      .header('content-length', file.sizeBytes)
      .header('x-sha256', file.sha256)
      .send(blob);
  });
}
