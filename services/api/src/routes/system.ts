import { sql } from 'kysely';
import { z } from 'zod';
import { retryTransient, Streams, Subjects } from '@trainyard/events';
import { countJobsByStatus, listWorkers } from '@trainyard/projections';
import type { Api, ApiDeps } from '../deps.ts';
import { errorResponses, HealthSchema, LimitsSchema, WorkerViewSchema } from '../schemas.ts';
import { gpuUseOf, type LastBeat } from '../heartbeats.ts';
import { workerView } from '../views.ts';
import { MAX_LIST_LIMIT } from './jobs.ts';
import { callerOf, readModel } from './common.ts';

/** A worker's last heartbeat, read from the stream: until the API's own view has caught up. */
async function lastHeartbeat(deps: ApiDeps, workerId: string): Promise<LastBeat | null> {
  const msg = await retryTransient(`read the last heartbeat of ${workerId}`, () =>
    deps.bus.jsm.streams.getMessage(Streams.heartbeats, {
      last_by_subj: Subjects.heartbeat(workerId),
    }),
  ).catch(() => null);
  return msg ? { at: msg.time.toISOString(), gpus: gpuUseOf(msg.data) } : null;
}

/** Workers, health, limits and metrics. */
export function systemRoutes(app: Api, deps: ApiDeps): void {
  app.get(
    '/v1/workers',
    {
      schema: {
        tags: ['system'],
        summary: "Workers, their GPUs with each one's use, and their last heartbeat",
        response: { 200: z.array(WorkerViewSchema), ...errorResponses(401, 503) },
      },
    },
    async (req) => {
      const admin = callerOf(req).role === 'admin';
      const rows = await readModel(() => listWorkers(deps.db));
      return Promise.all(
        rows.map(async (w) =>
          workerView(
            w,
            deps.heartbeats.ready ? deps.heartbeats.last(w.id) : await lastHeartbeat(deps, w.id),
            admin,
          ),
        ),
      );
    },
  );

  app.get(
    '/v1/limits',
    {
      schema: {
        tags: ['system'],
        summary: 'What this server accepts, so that a client can check before it uploads',
        response: { 200: LimitsSchema, ...errorResponses(401) },
      },
    },
    async (req) => {
      callerOf(req);
      return { maxUploadBytes: deps.maxUploadBytes, maxListLimit: MAX_LIST_LIMIT };
    },
  );

  app.get(
    '/healthz',
    {
      schema: {
        tags: ['system'],
        summary: 'Health: 200 while the event log is reachable',
        security: [],
        response: { 200: HealthSchema, 503: HealthSchema },
      },
    },
    async (_req, reply) => {
      const nats =
        !deps.bus.nc.isClosed() &&
        (await deps.bus.nc.flush().then(
          () => true,
          () => false,
        ));
      const postgres = await sql`select 1`.execute(deps.db).then(
        () => true,
        () => false,
      );
      const status = nats && postgres ? 'ok' : nats ? 'degraded' : 'down';
      return reply.code(nats ? 200 : 503).send({ status, nats, postgres });
    },
  );

  app.get(
    '/metrics',
    {
      schema: {
        tags: ['system'],
        summary: 'Prometheus metrics',
        security: [],
        response: {
          200: { description: 'Metrics', content: { 'text/plain': { schema: z.string() } } },
        },
      },
    },
    async (_req, reply) => {
      const [jobs, workers] = await Promise.all([
        countJobsByStatus(deps.db).catch(() => null),
        listWorkers(deps.db).catch(() => null),
      ]);
      if (jobs) {
        deps.metrics.jobsByStatus.reset();
        for (const [status, n] of Object.entries(jobs))
          deps.metrics.jobsByStatus.set({ status }, n);
      }
      if (workers) {
        deps.metrics.workersByStatus.reset();
        const counts = new Map<string, number>();
        for (const w of workers) counts.set(w.status, (counts.get(w.status) ?? 0) + 1);
        for (const [status, n] of counts) deps.metrics.workersByStatus.set({ status }, n);
      }
      return reply
        .type(deps.metrics.registry.contentType)
        .send(await deps.metrics.registry.metrics());
    },
  );
}
