import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { retryTransient, Streams, Subjects } from '@trainyard/events';
import { countJobsByStatus, listWorkers } from '@trainyard/projections';
import type { ApiDeps } from '../deps.ts';
import { openApiDocument } from '../openapi.ts';
import { workerView } from '../views.ts';
import { callerOf, readModel } from './common.ts';

async function lastHeartbeat(deps: ApiDeps, workerId: string): Promise<string | null> {
  const msg = await retryTransient(`read the last heartbeat of ${workerId}`, () =>
    deps.bus.jsm.streams.getMessage(Streams.heartbeats, {
      last_by_subj: Subjects.heartbeat(workerId),
    }),
  ).catch(() => null);
  return msg ? msg.time.toISOString() : null;
}

/** Workers, health, metrics and the API description. */
export function systemRoutes(app: FastifyInstance, deps: ApiDeps): void {
  app.get('/v1/workers', async (req) => {
    callerOf(req);
    const rows = await readModel(() => listWorkers(deps.db));
    return Promise.all(rows.map(async (w) => workerView(w, await lastHeartbeat(deps, w.id))));
  });

  app.get('/healthz', async (_req, reply) => {
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
  });

  app.get('/metrics', async (_req, reply) => {
    const [jobs, workers] = await Promise.all([
      countJobsByStatus(deps.db).catch(() => null),
      listWorkers(deps.db).catch(() => null),
    ]);
    if (jobs) {
      deps.metrics.jobsByStatus.reset();
      for (const [status, n] of Object.entries(jobs)) deps.metrics.jobsByStatus.set({ status }, n);
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
  });

  app.get('/docs', async () => openApiDocument());
  app.get('/docs/openapi.json', async () => openApiDocument());
}
