import { z } from 'zod';
import {
  DEFAULT_ENROLMENT_TTL_S,
  EnrolmentError,
  MAX_ENROLMENT_TTL_S,
  runWorkerCommand,
  WORKER_NAME,
} from '@trainyard/application';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { errorResponses } from '../schemas.ts';
import { actorOf, adminsOnly, requireAdmin } from './common.ts';
import type { Caller } from '../auth.ts';

const WorkerName = z
  .string()
  .regex(WORKER_NAME, 'a worker name is 1 to 64 letters, digits, _ or -');

const EnrolmentTokenSchema = z
  .object({
    token: z.string().describe('shown once; a worker enrols with it once'),
    name: z.string().nullable().describe('the worker it is for; null: any name not taken'),
    expiresAt: z.iso.datetime(),
  })
  .meta({ id: 'EnrolmentToken' });

const EnrolledSchema = z
  .object({
    name: z.string(),
    natsUrl: z.string().describe('where the worker connects, with its key'),
  })
  .meta({ id: 'EnrolledWorker' });

/**
 * The NATS URL as the worker can reach it: a server listening on every address is named by the
 * host the worker reached the API at.
 */
function reachableFrom(natsUrl: string, apiHost: string): string {
  return natsUrl
    .split(',')
    .map((u) => {
      const url = new URL(u);
      if (!['0.0.0.0', '[::]'].includes(url.hostname)) return u;
      url.hostname = apiHost.replace(/:\d+$/, '');
      return url.toString().replace(/\/$/, '');
    })
    .join(',');
}

/** Marks a revoked worker lost, so that its attempts are failed and run elsewhere at once. */
async function markRevoked(deps: ApiDeps, name: string, by: Caller): Promise<boolean> {
  const { events } = await runWorkerCommand(
    deps.bus.store,
    name,
    { type: 'RevokeWorker' },
    { actor: actorOf(by), now: new Date() },
  );
  return events.length > 0;
}

/** Worker enrolment: tokens (admins), enrolment (a worker with a token), revocation (admins). */
export function workerRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/workers/tokens',
    {
      onRequest: adminsOnly,
      schema: {
        tags: ['workers'],
        summary: 'Issue a one-time enrolment token for a worker (admins)',
        body: z.object({
          name: WorkerName.optional().describe('the worker it is for (default: any new name)'),
          ttlSeconds: z
            .number()
            .int()
            .min(60)
            .max(MAX_ENROLMENT_TTL_S)
            .default(DEFAULT_ENROLMENT_TTL_S),
        }),
        response: { 201: EnrolmentTokenSchema, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (req, reply) => {
      const caller = requireAdmin(req);
      const issued = await deps.workerKeys.issue(
        req.body.name ?? null,
        req.body.ttlSeconds,
        caller.username,
      );
      req.log.info(
        { by: caller.username, worker: issued.name, expiresAt: issued.expiresAt },
        'enrolment token issued',
      );
      return reply.code(201).send(issued);
    },
  );

  app.post(
    '/v1/workers/enrol',
    {
      schema: {
        tags: ['workers'],
        summary: 'Enrol a worker: spend a token on the public half of its nkey',
        security: [],
        body: z.object({
          token: z.string().max(256),
          name: WorkerName,
          publicKey: z.string().max(128).describe('an nkey user public key (U…)'),
        }),
        response: { 201: EnrolledSchema, ...errorResponses(400, 403, 409, 503) },
      },
    },
    async (req, reply) => {
      try {
        const worker = await deps.workerKeys.redeem(
          req.body.token,
          req.body.name,
          req.body.publicKey,
          async (name) => (await deps.bus.store.last('worker', name)) !== null,
        );
        req.log.info(
          { worker: worker.name, issuedBy: worker.issuedBy, publicKey: worker.publicKey },
          'worker enrolled',
        );
        return reply
          .code(201)
          .send({ name: worker.name, natsUrl: reachableFrom(deps.workerNatsUrl, req.hostname) });
      } catch (err) {
        if (err instanceof EnrolmentError) {
          req.log.warn({ worker: req.body.name, code: err.code }, 'enrolment refused');
          throw new ApiError(err.code, err.message);
        }
        throw err;
      }
    },
  );

  app.delete(
    '/v1/workers/:name',
    {
      onRequest: adminsOnly,
      schema: {
        tags: ['workers'],
        summary:
          'Revoke a worker: its NATS key stops working within seconds and its attempts run elsewhere (admins)',
        params: z.object({ name: z.string().max(128) }),
        response: {
          200: z.object({ name: z.string(), markedLost: z.boolean() }),
          ...errorResponses(401, 403, 404, 503),
        },
      },
    },
    async (req) => {
      const caller = requireAdmin(req);
      const { name } = req.params;
      if (!(await deps.workerKeys.revoke(name, caller.username))) {
        throw new ApiError('WORKER_NOT_FOUND', `no enrolled worker is named ${name}`);
      }
      const markedLost = await markRevoked(deps, name, caller);
      req.log.warn({ by: caller.username, worker: name, markedLost }, 'worker revoked');
      return { name, markedLost };
    },
  );
}
