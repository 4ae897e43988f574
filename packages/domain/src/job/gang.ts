/**
 * Gang jobs: one attempt runs a member on each of `nodes` workers, placed all at once. Each member
 * is known to its worker by an attempt id of its own (`memberAttemptId`); the attempt starts
 * once every member has, succeeds once every member exited 0, and ends, for all, with the first
 * member that fails.
 */
import type { AttemptStatus, JobEvent, Placement } from '@trainyard/events';
import { DomainError } from '../errors.ts';
import { currentAttempt, isTerminal, type AttemptState, type JobState } from './state.ts';

/** How many `gangIncomplete` ends a job takes before it fails rather than queue again. */
export const MAX_GANG_INCOMPLETE = 5;

/** How many workers an attempt spans: 1 but for a gang job's. */
export function gangSize(attempt: Pick<AttemptState, 'members'>): number {
  return 1 + attempt.members.length;
}

/** The id a member's worker knows it by: the attempt's own for rank 0. */
export function memberAttemptId(attemptId: string, rank: number): string {
  return rank === 0 ? attemptId : `${attemptId}-r${rank}`;
}

/** A member of an attempt: its rank, the id its worker knows it by, and what it holds. */
export interface Member extends Placement {
  rank: number;
  id: string;
}

/** Every member of an attempt, rank 0 first; one for an attempt of any other job. */
export function membersOf(attempt: AttemptState): Member[] {
  const rank0: Member = {
    rank: 0,
    id: attempt.id,
    workerId: attempt.workerId,
    gpus: attempt.gpus,
    vramBytes: attempt.vramBytes,
    cpus: attempt.cpus,
  };
  return [
    rank0,
    ...attempt.members.map((m, i) => ({
      ...m,
      rank: i + 1,
      id: memberAttemptId(attempt.id, i + 1),
    })),
  ];
}

/** The member of an attempt that runs on `workerId`, if one does (a gang has one per worker). */
export function memberOnWorker(attempt: AttemptState, workerId: string): Member | undefined {
  return membersOf(attempt).find((m) => m.workerId === workerId);
}

/** The attempt and member that `id` (an attempt's id, or a member's) names, if any does. */
export function memberOf(
  state: JobState,
  id: string,
): { attempt: AttemptState; member: Member } | undefined {
  for (let i = state.attempts.length - 1; i >= 0; i--) {
    const attempt = state.attempts[i]!;
    if (id !== attempt.id && !id.startsWith(`${attempt.id}-r`)) continue;
    const member = membersOf(attempt).find((m) => m.id === id);
    if (member) return { attempt, member };
  }
  return undefined;
}

/**
 * Where the member `id` stands, as its worker may know it: `running` once it started, while the
 * attempt lives (a gang's attempt is `assigned` until all its members have); null for none.
 */
export function memberStatus(state: JobState, id: string): AttemptStatus | null {
  const found = memberOf(state, id);
  if (!found) return null;
  const { attempt, member } = found;
  const live = attempt.status === 'assigned' || attempt.status === 'running';
  if (!live || isTerminal(state.status)) return attempt.status;
  return attempt.ranksStarted.includes(member.rank) ? 'running' : attempt.status;
}

/** A member of a gang started: the attempt starts with its last member. */
export function decideMemberStart(attempt: AttemptState, rank: number): JobEvent[] {
  if (attempt.ranksStarted.includes(rank)) return [];
  const events: JobEvent[] = [{ type: 'JobMemberStarted', data: { attemptId: attempt.id, rank } }];
  if (attempt.ranksStarted.length + 1 === gangSize(attempt)) {
    events.push({ type: 'JobStarted', data: { attemptId: attempt.id } });
  }
  return events;
}

/** Whether every other member of a gang's attempt has exited 0. */
export function othersSucceeded(attempt: AttemptState, rank: number): boolean {
  return attempt.ranksSucceeded.filter((r) => r !== rank).length === gangSize(attempt) - 1;
}

/**
 * Gives up on a gang's attempt whose members have not all started within `acceptMs` of its
 * assignment: the ranks that did not, and the attempt to end.
 */
export function incompleteGang(
  state: JobState,
  attemptId: string,
  now: Date,
  acceptMs: number,
): { attempt: AttemptState; missing: number[] } {
  const attempt = currentAttempt(state);
  if (!attempt || attempt.id !== attemptId || attempt.status !== 'assigned') {
    throw new DomainError('STALE_ATTEMPT', `attempt ${attemptId} is not waiting for its members`);
  }
  if (gangSize(attempt) === 1) {
    throw new DomainError('INVALID_TRANSITION', `attempt ${attemptId} is not a gang's`);
  }
  if (now.getTime() - Date.parse(attempt.assignedAt) < acceptMs) {
    throw new DomainError('INVALID_TRANSITION', `attempt ${attemptId} may still start`);
  }
  const missing = membersOf(attempt)
    .map((m) => m.rank)
    .filter((r) => !attempt.ranksStarted.includes(r));
  return { attempt, missing };
}

/** The deadline (ms since the epoch) by which every member of the job's attempt must start. */
export function gangDeadline(state: JobState, acceptMs: number): number | null {
  const attempt = currentAttempt(state);
  if (!attempt || attempt.status !== 'assigned' || gangSize(attempt) === 1) return null;
  if (isTerminal(state.status)) return null;
  return Date.parse(attempt.assignedAt) + acceptMs;
}
