import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { initialSessionState, runHolder, sessionEnded } from '@trainyard/domain';
import {
  EMPTY_HEAD,
  SessionStatus,
  type BuiltImage,
  type SessionSpec,
  type SessionTimers,
} from '@trainyard/events';
import {
  loadSession,
  newSessionId,
  runSessionCommand,
  type SessionSnapshot,
} from '@trainyard/application';
import { BlobKeys } from '@trainyard/blobs';
import { findSession, listSessions, type SessionRow } from '@trainyard/projections';
import type { Caller } from '../auth.ts';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { sessionBuildLog } from '../logs.ts';
import { pendingFields, refuseUnsatisfiable } from '../queue.ts';
import { teamToCharge } from '../charge.ts';
import { AfterQuerySchema, errorResponses, queryFlag } from '../schemas.ts';
import { timersInForce } from '../session-config.ts';
import {
  SessionAcceptedSchema,
  SessionConnectSchema,
  SessionFormSchema,
  SessionIdParamsSchema,
  SessionSpecBodySchema,
  SessionViewSchema,
  SshGatewaySchema,
} from '../session-schemas.ts';
import { keepUpload, readSubmission } from '../upload.ts';
import { sessionView } from '../views.ts';
import { actorOf, callerOf, readModel, waitForSeq } from './common.ts';
import { LOG_EVENTS, LOG_RESPONSE, LogQuery, sendLog } from './send-log.ts';
import { imageFromJob, withImagePolicy } from './session-images.ts';

/** The most sessions one `GET /v1/sessions` answers with. */
export const MAX_SESSION_LIST = 500;

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** The statuses of a session that waits for a place. */
const SESSION_WAITING = new Set<string>(['requested', 'building', 'queued']);

const notFound = (id: string) => new ApiError('SESSION_NOT_FOUND', `session ${id} not found`);

/** The `:id` route parameter; an id that cannot exist answers 404 like a missing one. */
function sessionIdParam(req: FastifyRequest): string {
  const id = (req.params as { id?: string }).id ?? '';
  if (!SESSION_ID.test(id)) throw new ApiError('SESSION_NOT_FOUND', 'session not found');
  return id;
}

const maySee = (caller: Caller, owner: string) =>
  caller.role === 'admin' || owner === caller.username;

/**
 * A session's row if the caller may see it; otherwise it does not exist. Read once the read
 * model holds the session's last event, so a read just after a change sees it.
 */
async function visibleSessionRow(deps: ApiDeps, caller: Caller, id: string): Promise<SessionRow> {
  let row = await readModel(() => findSession(deps.db, id));
  const { seq } = await deps.bus.store.head('session', id);
  if (seq > (row?.last_seq ?? 0)) {
    await waitForSeq(deps, seq);
    row = await readModel(() => findSession(deps.db, id));
  }
  if (!row || !maySee(caller, row.owner)) throw notFound(id);
  return row;
}

/** A session from the log if the caller may see it; otherwise it does not exist. */
async function visibleSession(deps: ApiDeps, caller: Caller, id: string): Promise<SessionSnapshot> {
  const snapshot = await loadSession(deps.bus.store, id);
  const { state } = snapshot;
  if (state.status === 'none' || !maySee(caller, state.owner)) throw notFound(id);
  return snapshot;
}

/** The host name the client reached the API at, as an SSH client takes it (no brackets). */
const requestHost = (req: FastifyRequest) => req.hostname.replace(/^\[(.*)\]$/, '$1');

/** Where the caller reaches the gateway, and its host key; 503 before the gateway started. */
async function gatewayOf(deps: ApiDeps, req: FastifyRequest) {
  const key = await deps.gateway.hostKey();
  if (!key) throw new ApiError('GATEWAY_UNAVAILABLE', 'the SSH gateway has not started yet');
  return {
    host: deps.ssh.host ?? requestHost(req),
    port: deps.ssh.port,
    hostKey: key.publicKey,
    hostKeyFingerprint: key.fingerprint,
  };
}

/**
 * How to log in to `username` (a session, or a running job) through the gateway: a fresh
 * one-time password for its current run, where the gateway listens, and its host key.
 */
export async function connectAnswer(
  deps: ApiDeps,
  req: FastifyRequest,
  username: string,
  run: { runId: string; owner: string },
) {
  const gateway = await gatewayOf(deps, req);
  const { password, expiresAt } = await deps.gateway.issuePassword(username, run);
  const { hostKey, hostKeyFingerprint, host, port } = gateway;
  return { host, port, username, password, expiresAt, hostKey, hostKeyFingerprint };
}

const CreateQuery = z.object({
  dryRun: queryFlag('check a JSON spec and answer 200 without requesting anything'),
});

const ListQuery = z.object({
  all: queryFlag("admins: everyone's sessions"),
  status: z.enum(Object.values(SessionStatus)).optional(),
  limit: z.coerce.number().int().min(1).max(MAX_SESSION_LIST).default(100),
  after: AfterQuerySchema.shape.after,
});

/** Request, list, show, stop and connect to interactive sessions. */
export function sessionRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/sessions',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Request an interactive session',
        description:
          'A JSON spec alone, or multipart with a `spec` field (JSON) and a `code` file (.tar.gz or .zip), unpacked in the session’s home. With `image` (the default where sessions run in containers), its own image is built first on that base with its code and requirements (`building`); with `fromJob`, it runs in that job’s image (one of yours, built). Answers at once; the session waits for a place (`queued`), then runs. Timers left out get the defaults; one above its cap is refused.',
        body: {
          content: {
            'application/json': { schema: SessionSpecBodySchema },
            'multipart/form-data': { schema: SessionFormSchema },
          },
        },
        querystring: CreateQuery,
        response: {
          202: SessionAcceptedSchema,
          200: z.object({ valid: z.literal(true) }).describe('dryRun: the spec would be taken'),
          ...errorResponses(400, 401, 413, 415, 503),
        },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const submitted = await readSubmission(req, deps.archiveLimits, SessionSpecBodySchema);
      const { staged } = submitted;
      let spec: SessionSpec;
      let timers: SessionTimers;
      let image: BuiltImage | undefined;
      let team: string | undefined;
      try {
        spec = withImagePolicy(submitted.spec, deps.images);
        timers = timersInForce(spec.timers, deps.sessionTimers);
        image = await imageFromJob(deps, caller, spec, staged);
        await refuseUnsatisfiable(deps, {
          kind: 'session',
          resources: spec.resources,
          nodes: 1,
          service: false,
          container: spec.image !== undefined || image !== undefined,
          probe: false,
        });
        team = await teamToCharge(deps, caller.username, spec.team);
      } catch (err) {
        await staged?.discard();
        throw err;
      }
      if (req.query.dryRun) {
        await staged?.discard();
        return reply.code(200).send({ valid: true as const });
      }
      const id = newSessionId();
      const code = staged
        ? await keepUpload(deps.blobs, BlobKeys.sessionCode(id), staged)
        : undefined;
      const result = await runSessionCommand(
        deps.bus.store,
        id,
        {
          type: 'RequestSession',
          owner: caller.username,
          spec,
          timers,
          ...(code && { code }),
          ...(image && { image }),
          ...(team !== undefined && { team }),
        },
        { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        { snapshot: { state: initialSessionState(id), head: EMPTY_HEAD } },
      );
      return reply.code(202).send({
        id,
        status: result.state.status as SessionStatus,
        seq: result.head.seq,
      });
    },
  );

  app.get(
    '/v1/sessions',
    {
      schema: {
        tags: ['sessions'],
        summary: "List your sessions (admins with all=true: everyone's), newest first",
        querystring: ListQuery,
        response: { 200: z.array(SessionViewSchema), ...errorResponses(400, 401, 403, 503, 504) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const q = req.query;
      if (q.all && caller.role !== 'admin')
        throw new ApiError('FORBIDDEN', "only admins may list everyone's sessions");
      if (q.after !== undefined) await waitForSeq(deps, q.after);
      const rows = await readModel(() =>
        listSessions(deps.db, {
          limit: q.limit,
          ...(!q.all && { owner: caller.username }),
          ...(q.status && { status: q.status }),
        }),
      );
      return rows.map(sessionView);
    },
  );

  app.get(
    '/v1/sessions/:id',
    {
      schema: {
        tags: ['sessions'],
        summary: 'A session',
        params: SessionIdParamsSchema,
        response: { 200: SessionViewSchema, ...errorResponses(401, 404, 503, 504) },
      },
    },
    async (req) => {
      const id = sessionIdParam(req);
      const row = await visibleSessionRow(deps, callerOf(req), id);
      return {
        ...sessionView(row),
        ...(await pendingFields(deps, id, SESSION_WAITING.has(row.status))),
      };
    },
  );

  app.post(
    '/v1/sessions/:id/stop',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Stop a session',
        description:
          'A session not yet placed stops at once; a running one once its worker ends it.',
        params: SessionIdParamsSchema,
        response: { 202: SessionAcceptedSchema, ...errorResponses(401, 404, 409, 503) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const id = sessionIdParam(req);
      const snapshot = await visibleSession(deps, caller, id);
      const result = await runSessionCommand(
        deps.bus.store,
        id,
        { type: 'StopSession', reason: 'user' },
        { actor: actorOf(caller), now: new Date(), correlationId: req.id },
        { snapshot },
      );
      return reply.code(202).send({
        id,
        status: result.state.status as SessionStatus,
        seq: result.head.seq,
      });
    },
  );

  app.get(
    '/v1/sessions/:id/logs',
    {
      schema: {
        tags: ['sessions'],
        summary: "The session's log: the build of its image, for a session that names one",
        description: `Plain text by default; \`follow\` streams until the build ends. ${LOG_EVENTS}`,
        params: SessionIdParamsSchema,
        querystring: LogQuery,
        response: { 200: LOG_RESPONSE, ...errorResponses(400, 401, 404, 503) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      const id = sessionIdParam(req);
      await visibleSession(deps, caller, id);
      return sendLog(deps, req, reply, sessionBuildLog(deps.bus, id), {
        header: () => Promise.resolve({ attempt: 0, build: true, workerId: null, gpus: [] }),
        end: async () => {
          const { state } = await visibleSession(deps, caller, id);
          const { status, failure } = state;
          return { status, ended: sessionEnded(status), exitCode: null, failure };
        },
      });
    },
  );

  app.post(
    '/v1/sessions/:id/connect',
    {
      schema: {
        tags: ['sessions'],
        summary: 'A one-time password for SSH to a running session, and where to connect',
        description:
          "Each call replaces the session's previous password. Pin `hostKey` (in known_hosts as `[host]:port KEY`) before connecting.",
        params: SessionIdParamsSchema,
        response: { 200: SessionConnectSchema, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const id = sessionIdParam(req);
      const { state } = await visibleSession(deps, caller, id);
      if (state.owner !== caller.username)
        throw new ApiError('FORBIDDEN', `only its owner (${state.owner}) may connect to ${id}`);
      const run = runHolder(state);
      if (state.status !== 'running' || !run) {
        const wait = ['queued', 'starting'].includes(state.status)
          ? '; wait until it is running'
          : '';
        throw new ApiError(
          'INVALID_TRANSITION',
          `session ${id} is ${state.status}: only a running session takes SSH connections${wait}`,
        );
      }
      return connectAnswer(deps, req, id, { runId: run.id, owner: state.owner });
    },
  );

  app.get(
    '/v1/ssh-gateway',
    {
      schema: {
        tags: ['sessions'],
        summary: 'Where the SSH gateway listens, and its host key',
        description:
          'For an SSH config (`trainyard ssh-config`): log in as the session id, with a registered key.',
        response: { 200: SshGatewaySchema, ...errorResponses(401, 503) },
      },
    },
    async (req) => {
      callerOf(req);
      return gatewayOf(deps, req);
    },
  );
}
