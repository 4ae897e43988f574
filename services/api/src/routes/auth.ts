import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Role } from '@trainyard/events';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { passwordProblem } from '../passwords.ts';
import { errorResponses, LoginSchema, TokenSchema } from '../schemas.ts';
import { callerOf } from './common.ts';
import { appendUserEvent } from './users.ts';

const RefreshBody = z.object({ refreshToken: z.string().min(1) });
const PasswordBody = z.object({
  currentPassword: z.string().min(1),
  newPassword: z.string().max(256),
});

/**
 * Checks a password, throttled per user and per source address: over the limit, the answer is
 * 429 whether the password is right or not.
 */
async function checkPassword(
  deps: ApiDeps,
  req: FastifyRequest,
  reply: FastifyReply,
  username: string,
  password: string,
): Promise<Role> {
  const wait = deps.throttle.waitMs(username, req.ip);
  if (wait > 0) {
    reply.header('retry-after', String(Math.ceil(wait / 1000)));
    throw new ApiError(
      'TOO_MANY_LOGIN_ATTEMPTS',
      `too many failed logins; try again in ${Math.ceil(wait / 60_000)} min`,
    );
  }
  const checked = await deps.credentials.check(username, password);
  if (checked.ok) {
    deps.throttle.succeeded(username);
    return checked.role;
  }
  if (checked.disabled) throw new ApiError('ACCOUNT_DISABLED', 'this account is disabled');
  deps.throttle.failed(username, req.ip);
  throw new ApiError('UNAUTHENTICATED', 'wrong username or password');
}

/** A session's access token, and the refresh token that gets the next one. */
async function tokens(
  deps: ApiDeps,
  username: string,
  role: Role,
  sid: string,
  refreshToken: string,
) {
  const { token, expiresAt } = await deps.tokens.issueWithExpiry({ username, role, sid });
  return { token, refreshToken, username, role, expiresAt: expiresAt.toISOString() };
}

/** Login, refresh, logout and a new password. */
export function authRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/auth/login',
    {
      schema: {
        tags: ['auth'],
        summary: 'Log in: an access token, and a refresh token for the next ones',
        description:
          'Failed logins are limited per user and per source address; past the limit the answer is 429 with Retry-After, even for the right password.',
        security: [],
        body: LoginSchema,
        response: { 200: TokenSchema, ...errorResponses(400, 401, 403, 429, 503) },
      },
    },
    async (req, reply) => {
      const { username, password } = req.body;
      const role = await checkPassword(deps, req, reply, username, password);
      const { sid, refreshToken } = await deps.sessions.start(username, role);
      return tokens(deps, username, role, sid, refreshToken);
    },
  );

  app.post(
    '/v1/auth/refresh',
    {
      schema: {
        tags: ['auth'],
        summary: 'Trade a refresh token for a new access token and a new refresh token',
        description: 'Each refresh token works once; one used twice ends its session.',
        security: [],
        body: RefreshBody,
        response: { 200: TokenSchema, ...errorResponses(400, 401, 503) },
      },
    },
    async (req) => {
      const next = await deps.sessions.refresh(req.body.refreshToken);
      return tokens(deps, next.username, next.role, next.sid, next.refreshToken);
    },
  );

  app.post(
    '/v1/auth/logout',
    {
      schema: {
        tags: ['auth'],
        summary: "End the caller's session: its access and refresh tokens stop working",
        response: { 204: z.undefined(), ...errorResponses(401, 503) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      if (caller.sid) await deps.sessions.end(caller.username, caller.sid);
      return reply.code(204).send();
    },
  );

  app.post(
    '/v1/me/password',
    {
      schema: {
        tags: ['auth'],
        summary: 'Change your password; every session and token of yours ends',
        body: PasswordBody,
        response: { 204: z.undefined(), ...errorResponses(400, 401, 429, 503) },
      },
    },
    async (req, reply) => {
      const caller = callerOf(req);
      await checkPassword(deps, req, reply, caller.username, req.body.currentPassword);
      const problem = passwordProblem(caller.username, req.body.newPassword);
      if (problem) throw new ApiError('VALIDATION_FAILED', `newPassword: ${problem}`);
      await deps.credentials.set(caller.username, req.body.newPassword, caller.role);
      await deps.sessions.endAll(caller.username);
      await appendUserEvent(
        deps,
        caller.username,
        { type: 'UserPasswordChanged', data: {} },
        caller,
      );
      return reply.code(204).send();
    },
  );
}
