/**
 * Gang jobs: one attempt runs a member on each of `nodes` workers, placed all at once. Each member
 * is known to its worker by an attempt id of its own (`memberAttemptId`); the attempt starts
 * once every member has, succeeds once every member exited 0, and ends, for all, with the first
 * member that fails.
 */
import type { AttemptStatus, Placement } from '@trainyard/events';
import { drawPorts } from './service.ts';
import { isTerminal, slotHolder, type AttemptState, type JobState } from './state.ts';

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
 * attempt lives (a gang's attempt is `assigned` until all its members have), and as it ended
 * once it has; null for none.
 */
export function memberStatus(state: JobState, id: string): AttemptStatus | null {
  const found = memberOf(state, id);
  if (!found) return null;
  const { attempt, member } = found;
  const live = attempt.status === 'assigned' || attempt.status === 'running';
  if (!live || isTerminal(state.status)) return attempt.status;
  const end = attempt.memberEnds.find((e) => e.rank === member.rank);
  if (end) return end.failure ? 'failed' : 'succeeded';
  return attempt.ranksStarted.includes(member.rank) ? 'running' : attempt.status;
}

/**
 * When a gang's attempt is given up on (ms since the epoch): `acceptMs` after its assignment,
 * while its members have not all started, or after its members were told to stop, while some
 * have not ended. Null for any other attempt.
 */
export function gangDeadline(state: JobState, acceptMs: number): number | null {
  const attempt = slotHolder(state);
  if (!attempt || gangSize(attempt) === 1) return null;
  if (attempt.brokenAt !== null) return Date.parse(attempt.brokenAt) + acceptMs;
  if (attempt.status !== 'assigned') return null;
  return Date.parse(attempt.assignedAt) + acceptMs;
}

/** The first port a gang's rank 0 may listen on for the others (torchrun's default). */
const MASTER_PORT_BASE = 29_500;
/** How many ports, from the first, a gang's rank 0 may be given. */
export const MASTER_PORTS = 1_000;

/**
 * The port a new gang attempt's rank 0 listens on for the others, on `workerId`: one of
 * `MASTER_PORTS` from torchrun's default, drawn by the attempt's id, past those that live gangs
 * whose rank 0 runs there hold, and those `chosen` for gangs being assigned there.
 */
export function masterPortFor(
  jobs: Iterable<{ state: JobState }>,
  workerId: string,
  attemptId: string,
  chosen: Iterable<number> = [],
): number {
  const taken = new Set<number>(chosen);
  for (const { state } of jobs) {
    const live = slotHolder(state);
    if (live?.workerId === workerId && live.masterPort !== null) taken.add(live.masterPort);
  }
  return drawPorts(MASTER_PORT_BASE, MASTER_PORTS, 1, attemptId, taken)[0]!;
}
