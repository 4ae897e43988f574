import { z } from 'zod';
import { ConcurrencyError, EMPTY_HEAD, USERNAME } from '@trainyard/events';
import { listUsers } from '@trainyard/projections';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { errorResponses, LoginSchema, TokenSchema, UserViewSchema } from '../schemas.ts';
import { actorOf, adminsOnly, readModel, requireAdmin } from './common.ts';
import type { Caller } from '../auth.ts';

export const NewUserSchema = z.object({
  username: z
    .string()
    .regex(USERNAME, 'lowercase letters, digits, _ or -, 2 to 32 long, starting with a letter'),
  password: z.string().min(8, 'at least 8 characters').max(256),
  role: z.enum(['admin', 'user']).default('user'),
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

/** Login, and user management for admins. */
export function userRoutes(app: Api, deps: ApiDeps): void {
  app.post(
    '/v1/auth/login',
    {
      schema: {
        tags: ['auth'],
        summary: 'Exchange a username and password for a bearer token',
        security: [],
        body: LoginSchema,
        response: { 200: TokenSchema, ...errorResponses(400, 401, 503) },
      },
    },
    async (req) => {
      const { username, password } = req.body;
      const role = await deps.credentials.verify(username, password);
      if (!role) throw new ApiError('UNAUTHENTICATED', 'wrong username or password');
      const { token, expiresAt } = await deps.tokens.issueWithExpiry({ username, role });
      return { token, username, role, expiresAt: expiresAt.toISOString() };
    },
  );

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
      }));
    },
  );
}
