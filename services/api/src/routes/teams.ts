import { z } from 'zod';
import { runTeamCommand } from '@trainyard/application';
import { TEAM_NAME, TeamRole, USERNAME } from '@trainyard/events';
import type { Caller } from '../auth.ts';
import { currentTeams } from '../charge.ts';
import type { Api, ApiDeps } from '../deps.ts';
import { ApiError } from '../errors.ts';
import { errorResponses, isoTime, QuotaBodySchema, QuotaSetShape } from '../schemas.ts';
import { actorOf, adminsOnly, callerOf, requireAdmin } from './common.ts';

const TeamNameSchema = z
  .string()
  .regex(TEAM_NAME, 'lowercase letters, digits, _ or -, 2 to 32 long, starting with a letter');
const TeamParams = z.object({ team: TeamNameSchema });
const MemberParams = z.object({
  team: TeamNameSchema,
  username: z.string().regex(USERNAME, 'not a username'),
});

const TeamViewSchema = z
  .object({
    name: z.string(),
    createdAt: isoTime,
    maxGpus: z
      .number()
      .int()
      .nullable()
      .describe('the most GPUs its members’ work charged to it may hold at once; null: no quota'),
    maxGpuHours: z
      .number()
      .nullable()
      .describe('the GPU-hours that work may take a calendar month (UTC); null: no quota'),
    members: z
      .array(z.object({ username: z.string(), role: TeamRole, since: isoTime }))
      .describe('in the order they joined'),
  })
  .meta({ id: 'Team' });

const MemberSchema = z.object({
  team: z.string(),
  username: z.string(),
  role: TeamRole.nullable(),
});

/**
 * Teams: groups of users that share a GPU quota. Admins make them, staff them and set their
 * quotas; a lead sees the team's queue.
 */
export function teamRoutes(app: Api, deps: ApiDeps): void {
  const meta = (caller: Caller, req: { id: string }) => ({
    actor: actorOf(caller),
    now: new Date(),
    correlationId: req.id,
  });

  app.post(
    '/v1/teams',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['teams'],
        summary: 'Create a team (admins)',
        body: z.object({ name: TeamNameSchema }).strict(),
        response: {
          201: z.object({ name: z.string() }),
          ...errorResponses(400, 401, 403, 409, 503),
        },
      },
    },
    async (req, reply) => {
      const admin = requireAdmin(req);
      const { name } = req.body;
      await runTeamCommand(deps.bus.store, name, { type: 'CreateTeam' }, meta(admin, req));
      return reply.code(201).send({ name });
    },
  );

  app.get(
    '/v1/teams',
    {
      schema: {
        tags: ['teams'],
        summary: 'The teams you are in (admins: every team)',
        response: { 200: z.array(TeamViewSchema), ...errorResponses(401, 503, 504) },
      },
    },
    async (req) => {
      const caller = callerOf(req);
      const rows = await currentTeams(deps, caller.role === 'admin' ? undefined : caller.username);
      return rows.map((t) => ({
        name: t.name,
        createdAt: t.created_at.toISOString(),
        maxGpus: t.max_gpus,
        maxGpuHours: t.max_gpu_hours,
        members: t.members.map(
          (m) => ({ ...m, role: m.role === 'lead' ? 'lead' : 'member' }) as const,
        ),
      }));
    },
  );

  app.put(
    '/v1/teams/:team/members/:username',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['teams'],
        summary: 'Add a member to a team, or change their role (admins)',
        description:
          'Jobs and sessions a member submits from then on are charged to the team they name (`team` in the spec), or else to the first team they joined.',
        params: MemberParams,
        body: z
          .object({
            role: TeamRole.optional().describe(
              'member or lead (sees the team’s queue); left out: a member keeps theirs, a new one is a member',
            ),
          })
          .strict()
          .optional(),
        response: { 200: MemberSchema, ...errorResponses(400, 401, 403, 404, 409, 503) },
      },
    },
    async (req) => {
      const caller = requireAdmin(req);
      const { team, username } = req.params;
      if (!(await deps.credentials.exists(username)))
        throw new ApiError('NOT_FOUND', `user ${username} not found`);
      const role = req.body?.role;
      const state = await runTeamCommand(
        deps.bus.store,
        team,
        { type: 'AddTeamMember', username, ...(role && { role }) },
        meta(caller, req),
      );
      return { team, username, role: state.members[username] ?? null };
    },
  );

  app.delete(
    '/v1/teams/:team/members/:username',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['teams'],
        summary: 'Remove a member from a team (admins)',
        description: 'What they submitted before stays charged to the team until it ends.',
        params: MemberParams,
        response: { 200: MemberSchema, ...errorResponses(400, 401, 403, 404, 409, 503) },
      },
    },
    async (req) => {
      const caller = requireAdmin(req);
      const { team, username } = req.params;
      await runTeamCommand(
        deps.bus.store,
        team,
        { type: 'RemoveTeamMember', username },
        meta(caller, req),
      );
      return { team, username, role: null };
    },
  );

  app.put(
    '/v1/teams/:team/quota',
    {
      preValidation: adminsOnly,
      schema: {
        tags: ['teams'],
        summary: 'Set the most GPUs a team’s work may hold at once (admins)',
        description:
          'Jobs and sessions charged to the team that would take it past the quota wait, queued, with the reason `overQuota`; each member’s own quota holds as well. `null` lifts it.',
        params: TeamParams,
        body: QuotaBodySchema,
        response: {
          200: z.object({ name: z.string(), ...QuotaSetShape }),
          ...errorResponses(400, 401, 403, 404, 409, 503),
        },
      },
    },
    async (req) => {
      const admin = requireAdmin(req);
      const { team } = req.params;
      const { maxGpus, maxGpuHours } = req.body;
      if (maxGpus !== undefined)
        await runTeamCommand(
          deps.bus.store,
          team,
          { type: 'SetTeamQuota', maxGpus },
          meta(admin, req),
        );
      if (maxGpuHours !== undefined)
        await runTeamCommand(
          deps.bus.store,
          team,
          { type: 'SetTeamGpuHoursQuota', maxGpuHours },
          meta(admin, req),
        );
      return { name: team, ...req.body };
    },
  );
}
