import multipart from '@fastify/multipart';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import {
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Api, ApiDeps } from './deps.ts';
import { toErrorResponse } from './errors.ts';
import { documentRoute, OPENAPI_INFO } from './openapi.ts';
import { authRoutes } from './routes/auth.ts';
import { jobDataRoutes } from './routes/job-data.ts';
import { jobMetricsRoutes } from './routes/job-metrics.ts';
import { jobHoldRoutes } from './routes/job-holds.ts';
import { teamRoutes } from './routes/teams.ts';
import { jobShellRoutes } from './routes/job-shell.ts';
import { jobRoutes } from './routes/jobs.ts';
import { queueRoutes } from './routes/queue.ts';
import { sessionRoutes } from './routes/sessions.ts';
import { sshKeyRoutes } from './routes/ssh-keys.ts';
import { systemRoutes } from './routes/system.ts';
import { usageRoutes } from './routes/usage.ts';
import { userRoutes } from './routes/users.ts';
import { workerRoutes } from './routes/workers.ts';

const PUBLIC = new Set(['/v1/auth/login', '/v1/auth/refresh', '/v1/workers/enrol']);

/** Builds the HTTP API. Tests call `app.inject()`; `start` listens. */
export async function buildApp(
  deps: ApiDeps,
  opts: { https?: { cert: Buffer; key: Buffer } } = {},
): Promise<FastifyInstance> {
  const app = Fastify({
    ...(opts.https && { https: opts.https }),
    loggerInstance: deps.log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
    return503OnClosing: true,
    routerOptions: { maxParamLength: 2048 },
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  await app.register(multipart, {
    limits: { fileSize: deps.maxUploadBytes, files: 1, fields: 4, fieldSize: 1024 * 1024 },
  });
  await app.register(swagger, {
    openapi: OPENAPI_INFO,
    transform: documentRoute,
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  app.addHook('onRequest', async (req) => {
    if (!req.url.startsWith('/v1/') || PUBLIC.has(req.routeOptions.url ?? '')) return;
    req.caller = await deps.tokens.verify(req.headers.authorization);
  });
  app.addHook('onResponse', async (req, reply) => {
    deps.metrics.httpRequests
      .labels(req.method, req.routeOptions.url ?? 'unmatched', String(reply.statusCode))
      .observe(reply.elapsedTime / 1000);
  });

  app.setErrorHandler((err, req, reply) => {
    const { status, body } = toErrorResponse(err);
    if (status === 503) req.log.warn({ code: body.error.code, url: req.url }, body.error.message);
    else if (status >= 500) req.log.error({ err, url: req.url }, 'request failed');
    return reply.code(status).send(body);
  });
  app.setNotFoundHandler((req, reply) =>
    reply.code(404).send({
      error: { code: 'NOT_FOUND', message: `no route ${req.method} ${req.url.split('?')[0]}` },
    }),
  );

  const typed: Api = app.withTypeProvider<ZodTypeProvider>();
  authRoutes(typed, deps);
  userRoutes(typed, deps);
  teamRoutes(typed, deps);
  jobRoutes(typed, deps);
  queueRoutes(typed, deps);
  jobShellRoutes(typed, deps);
  jobDataRoutes(typed, deps);
  jobMetricsRoutes(typed, deps);
  jobHoldRoutes(typed, deps);
  sessionRoutes(typed, deps);
  sshKeyRoutes(typed, deps);
  systemRoutes(typed, deps);
  workerRoutes(typed, deps);
  usageRoutes(typed, deps);
  return app;
}
