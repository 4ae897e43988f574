import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { ConcurrencyError, EMPTY_HEAD, USERNAME } from '@trainyard/events';
import { listUsers } from '@trainyard/projections';
import type { ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { actorOf, readModel, requireAdmin } from './common.ts';
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
export function userRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const Login = z.object({ username: z.string().min(1), password: z.string().min(1) });

  app.post('/v1/auth/login', async (req) => {
    const { username, password } = Login.parse(req.body);
    const role = await deps.credentials.verify(username, password);
    if (!role) throw new ApiError('UNAUTHENTICATED', 'wrong username or password');
    return { token: await deps.tokens.issue({ username, role }), username, role };
  });

  app.post('/v1/users', async (req, reply) => {
    const admin = requireAdmin(req);
    const user = NewUserSchema.parse(req.body);
    await createUser(deps, user, admin);
    return reply.code(201).send({ username: user.username, role: user.role });
  });

  app.get('/v1/users', async (req) => {
    requireAdmin(req);
    const rows = await readModel(() => listUsers(deps.db));
    return rows.map((u) => ({
      username: u.username,
      role: u.role,
      createdAt: u.created_at.toISOString(),
    }));
  });
}
