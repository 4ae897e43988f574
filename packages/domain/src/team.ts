/**
 * The team aggregate: a group of users that shares a GPU quota. Admins make teams, staff them and
 * set their quotas; a lead sees what is charged to the team. Which team a job or a session
 * is charged to is decided when it is submitted, from the teams its owner is in then.
 */
import type { TeamEvent, TeamRole } from '@trainyard/events';
import { assertNever, DomainError } from './errors.ts';

export interface TeamState {
  name: string;
  exists: boolean;
  /** Each member's role, by username. */
  members: Record<string, TeamRole>;
  maxGpus: number | null;
  maxGpuHours: number | null;
}

export const initialTeam = (name: string): TeamState => ({
  name,
  exists: false,
  members: {},
  maxGpus: null,
  maxGpuHours: null,
});

export type TeamCommand =
  | { type: 'CreateTeam' }
  /** Adds a member, or sets their role; without one, a member keeps theirs (a new one: `member`). */
  | { type: 'AddTeamMember'; username: string; role?: TeamRole }
  | { type: 'RemoveTeamMember'; username: string }
  | { type: 'SetTeamQuota'; maxGpus: number | null }
  | { type: 'SetTeamGpuHoursQuota'; maxGpuHours: number | null };

export function evolveTeam(state: TeamState, event: TeamEvent): TeamState {
  switch (event.type) {
    case 'TeamCreated':
      return { ...state, exists: true };
    case 'TeamMemberAdded':
      return { ...state, members: { ...state.members, [event.data.username]: event.data.role } };
    case 'TeamMemberRemoved': {
      const { [event.data.username]: _gone, ...members } = state.members;
      return { ...state, members };
    }
    case 'TeamQuotaSet':
      return { ...state, maxGpus: event.data.maxGpus };
    case 'TeamGpuHoursQuotaSet':
      return { ...state, maxGpuHours: event.data.maxGpuHours };
    default:
      return assertNever(event);
  }
}

/** Decides what a command on a team means; throws `DomainError` when it may not be. */
export function decideTeam(command: TeamCommand, state: TeamState): TeamEvent[] {
  if (command.type === 'CreateTeam') {
    if (state.exists) throw new DomainError('TEAM_EXISTS', `team ${state.name} already exists`);
    return [{ type: 'TeamCreated', data: { name: state.name } }];
  }
  if (!state.exists) throw new DomainError('TEAM_NOT_FOUND', `team ${state.name} not found`);
  switch (command.type) {
    case 'AddTeamMember': {
      const now = state.members[command.username];
      const role = command.role ?? now ?? 'member';
      if (now === role) return [];
      return [{ type: 'TeamMemberAdded', data: { username: command.username, role } }];
    }
    case 'RemoveTeamMember':
      if (!(command.username in state.members)) return [];
      return [{ type: 'TeamMemberRemoved', data: { username: command.username } }];
    case 'SetTeamQuota':
      if (state.maxGpus === command.maxGpus) return [];
      return [{ type: 'TeamQuotaSet', data: { maxGpus: command.maxGpus } }];
    case 'SetTeamGpuHoursQuota':
      if (state.maxGpuHours === command.maxGpuHours) return [];
      return [{ type: 'TeamGpuHoursQuotaSet', data: { maxGpuHours: command.maxGpuHours } }];
    default:
      return assertNever(command);
  }
}
