/**
 * Team events. A team is a group of users that shares a GPU quota: the work of its members
 * counts against it, as against each member's own quota.
 */
import { z } from 'zod';
import { GpuHoursQuota, MAX_QUOTA_GPUS, USERNAME } from './user.ts';

/** A team's name: as a username is written. */
export const TEAM_NAME = USERNAME;

/** What a member may do: a lead adds and removes the team's members, as admins may. */
export const TeamRole = z.enum(['member', 'lead']);
export type TeamRole = z.infer<typeof TeamRole>;

/** An admin made the team. */
export const TeamCreated = z.object({
  type: z.literal('TeamCreated'),
  data: z.object({ name: z.string().regex(TEAM_NAME) }),
});

/** A user joined the team, or their role in it changed. */
export const TeamMemberAdded = z.object({
  type: z.literal('TeamMemberAdded'),
  data: z.object({ username: z.string().regex(USERNAME), role: TeamRole }),
});

/** A user left the team: their work submitted from now on is no longer charged to it. */
export const TeamMemberRemoved = z.object({
  type: z.literal('TeamMemberRemoved'),
  data: z.object({ username: z.string().regex(USERNAME) }),
});

/**
 * An admin set what the work charged to the team may hold at once: at most `maxGpus` GPUs
 * between all its members' jobs and sessions (null: no limit).
 */
export const TeamQuotaSet = z.object({
  type: z.literal('TeamQuotaSet'),
  data: z.object({ maxGpus: z.number().int().min(0).max(MAX_QUOTA_GPUS).nullable() }),
});

/** As `UserGpuHoursQuotaSet`, for the work charged to the team. */
export const TeamGpuHoursQuotaSet = z.object({
  type: z.literal('TeamGpuHoursQuotaSet'),
  data: z.object({ maxGpuHours: GpuHoursQuota }),
});

export const TeamEventSchema = z.discriminatedUnion('type', [
  TeamCreated,
  TeamMemberAdded,
  TeamMemberRemoved,
  TeamQuotaSet,
  TeamGpuHoursQuotaSet,
]);
export type TeamEvent = z.infer<typeof TeamEventSchema>;
