import { z } from 'zod';
import { ConcurrencyError, EMPTY_HEAD, retry, USERNAME, type UserEvent } from '@trainyard/events';
import { listUsers } from '@trainyard/projections';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { MIN_PASSWORD_LENGTH, passwordProblem } from '../passwords.ts';
import { errorResponses, QuotaBodySchema, QuotaSetShape, UserViewSchema } from '../schemas.ts';
import { actorOf, adminsOnly, readModel, requireAdmin } from './common.ts';
import type { Caller } from '../auth.ts';

export const NewUserSchema = z
  .object({
    username: z
      .string()
      .regex(USERNAME, 'lowercase letters, digits, _ or -, 2 to 32 long, starting with a letter'),
    password: z
      .string()
      .max(256)
      .describe(
        `at least ${MIN_PASSWORD_LENGTH} characters, not the username, not a common password`,
      ),
    role: z.enum(['admin', 'user']).default('user'),
  })
  .superRefine((u, ctx) => {
    const problem = passwordProblem(u.username, u.password);
    if (problem) ctx.addIssue({ code: 'custom', path: ['password'], message: problem });
  });
export type NewUser = z.infer<typeof NewUserSchema>;

/** Records the user in the log, then keeps the password hash in the credentials bucket. */
export async function createUser(
  deps: Pick<ApiDeps, 'bus' | 'credentials'>,
  user: NewUser,
  by: Caller | null,
) {
  try {
    await deps.bus.store.append({
      aggregate: 'user',
      aggregateId: user.username,
      head: EMPTY_HEAD,
      events: [{ type: 'UserCreated', data: { username: user.username, role: user.role } }],
      meta: { actor: by ? actorOf(by) : { kind: 'service', id: 'bootstrap' }, now: new Date() },
    });
  } catch (err) {
    if (err instanceof ConcurrencyError)
      throw new ApiError('USER_EXISTS', `user ${user.username} already exists`);
    throw err;
  }
  await deps.credentials.set(user.username, user.password, user.role);
}

/** Appends a user event after the user's last one. */
export async function appendUserEvent(
  deps: Pick<ApiDeps, 'bus'>,
  username: string,
  event: UserEvent,
  by: Caller,
): Promise<void> {
  await deps.bus.store.append({
    aggregate: 'user',
    aggregateId: username,
    head: await deps.bus.store.head('user', username),
    events: [event],
    meta: { actor: actorOf(by), now: new Date() },
  });
}

const UsernameParams = z.object({ username: z.string().regex(USERNAME, 'not a username') });
const DisableBody = z.object({ reason: z.string().max(512).default('') });
/** User management, for admins. */
export function userRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/users',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['users'],
        summary: 'Create a user (admins)',
        body: NewUserSchema,
        response: {
          201: UserViewSchema.pick({ username: true, role: true }),
          ...errorResponses(400, 401, 403, 409, 503),
        },
      },
    },
    async (req, reply) => {
      const admin = requireAdmin(req);
      await createUser(deps, req.body, admin);
      return reply.code(201).send({ username: req.body.username, role: req.body.role });
    },
  );

  app.get(
    '/v1/users',
    {
      schema: {
        tags: ['users'],
        summary: 'List users (admins)',
        response: { 200: z.array(UserViewSchema), ...errorResponses(401, 403, 503) },
      },
    },
    async (req) => {
      requireAdmin(req);
      const rows = await readModel(() => listUsers(deps.db));
      return rows.map((u) => ({
        username: u.username,
        role: u.role === 'admin' ? ('admin' as const) : ('user' as const),
        createdAt: u.created_at.toISOString(),
        disabled: u.disabled_at !== null,
        maxGpus: u.max_gpus,
        maxGpuHours: u.max_gpu_hours,
      }));
    },
  );

  app.post(
    '/v1/users/:username/disable',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['users'],
        summary: 'Disable a user (admins): its logins are refused and its sessions end',
        params: UsernameParams,
        body: DisableBody.optional(),
        response: {
          200: z.object({ username: z.string(), disabled: z.literal(true) }),
          ...errorResponses(400, 401, 403, 404, 503),
        },
      },
    },
    async (req) => {
      const admin = requireAdmin(req);
      const { username } = req.params;
      if (username === admin.username)
        throw new ApiError('VALIDATION_FAILED', 'you cannot disable yourself');
      if (!(await deps.credentials.exists(username)))
        throw new ApiError('NOT_FOUND', `user ${username} not found`);
      await deps.credentials.disable(username);
      await deps.sessions.endAll(username);
      await appendUserEvent(
        deps,
        username,
        { type: 'UserDisabled', data: { reason: req.body?.reason ?? '' } },
        admin,
      );
      return { username, disabled: true as const };
    },
  );

  app.put(
    '/v1/users/:username/quota',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['users'],
        summary: 'Set the GPUs a user’s work may hold at once, or take a month (admins)',
        description:
          'Jobs and sessions that would take the user past `maxGpus` wait, queued, with the reason `overQuota`, until some of their work ends; once their work has taken `maxGpuHours` GPU-hours in a calendar month (UTC), what asks for GPUs waits for the next month. Work already running is not stopped. `null` lifts a quota; one left out stays as it is.',
        params: UsernameParams,
        body: QuotaBodySchema,
        response: {
          200: z.object({ username: z.string(), ...QuotaSetShape }),
          ...errorResponses(400, 401, 403, 404, 409, 503),
        },
      },
    },
    async (req) => {
      const admin = requireAdmin(req);
      const { username } = req.params;
      if (!(await deps.credentials.exists(username)))
        throw new ApiError('NOT_FOUND', `user ${username} not found`);
      const { maxGpus, maxGpuHours } = req.body;
      const events: UserEvent[] = [
        ...(maxGpus !== undefined ? [{ type: 'UserQuotaSet' as const, data: { maxGpus } }] : []),
        ...(maxGpuHours !== undefined
          ? [{ type: 'UserGpuHoursQuotaSet' as const, data: { maxGpuHours } }]
          : []),
      ];
      // It depends on nothing the user's events say: another admin's change meanwhile is no
      // reason to refuse it.
      for (const event of events)
        await retry(() => appendUserEvent(deps, username, event, admin), {
          attempts: 3,
          baseMs: 20,
          retryable: (err) => err instanceof ConcurrencyError,
        });
      return { username, ...req.body };
    },
  );
}
