import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The API's Prometheus metrics, in a registry of their own. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'trainyard_api_' });
  return {
    registry,
    httpRequests: new Histogram({
      name: 'trainyard_http_request_duration_seconds',
      help: 'HTTP request duration by route and status',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
      registers: [registry],
    }),
    jobsSubmitted: new Counter({
      name: 'trainyard_jobs_submitted_total',
      help: 'Jobs accepted by the API',
      registers: [registry],
    }),
    jobsByStatus: new Gauge({
      name: 'trainyard_jobs',
      help: 'Jobs by status, from the projections',
      labelNames: ['status'],
      registers: [registry],
    }),
    workersByStatus: new Gauge({
      name: 'trainyard_workers',
      help: 'Workers by status, from the projections',
      labelNames: ['status'],
      registers: [registry],
    }),
  };
}
export type ApiMetrics = ReturnType<typeof createMetrics>;
