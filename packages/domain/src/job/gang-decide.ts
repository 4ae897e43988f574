/** What a gang job's members starting, and the acceptance time passing, mean. */
import type { JobEvent } from '@trainyard/events';
import { DomainError } from '../errors.ts';
import { failure } from '../failures.ts';
import { endGang, endMember, gangBroken, membersRunning } from './ends.ts';
import { gangSize, membersOf } from './gang.ts';
import { DEFAULT_BACKOFF } from '../backoff.ts';
import { currentAttempt, type AttemptState, type JobState } from './state.ts';

/**
 * A member of a gang started: the attempt starts with its last member. Once the members are
 * being stopped, one that had not started does not (or, where none had, the attempt ends).
 */
export function decideMemberStart(
  state: JobState,
  attempt: AttemptState,
  rank: number,
): JobEvent[] {
  if (attempt.ranksStarted.includes(rank)) return [];
  if (gangBroken(state, attempt)) {
    if (membersRunning(attempt, attempt.memberEnds, true).length > 0) {
      throw new DomainError(
        'INVALID_TRANSITION',
        `attempt ${attempt.id} is being stopped: rank ${rank} does not start`,
      );
    }
    return endGang(state, attempt, attempt.memberEnds, {
      durationMs: 0,
      now: new Date(attempt.brokenAt ?? attempt.assignedAt),
      jitter: 0,
      policy: DEFAULT_BACKOFF,
    });
  }
  const events: JobEvent[] = [{ type: 'JobMemberStarted', data: { attemptId: attempt.id, rank } }];
  if (attempt.ranksStarted.length + 1 === gangSize(attempt)) {
    events.push({ type: 'JobStarted', data: { attemptId: attempt.id } });
  }
  return events;
}

/**
 * The acceptance time passed on a gang's attempt. Members that have not all started: the first
 * missing one ends as `gangIncomplete` (a platform failure, queued again after a backoff without
 * spending a retry, five times at most), and the others are stopped. Members told to stop that
 * have not all ended: the attempt ends without them, as those that did.
 */
export function abandonGang(
  state: JobState,
  attemptId: string,
  now: Date,
  acceptMs: number,
  jitter: number,
): JobEvent[] {
  const attempt = currentAttempt(state);
  const live = attempt?.status === 'assigned' || attempt?.status === 'running';
  if (!attempt || attempt.id !== attemptId || !live || gangSize(attempt) === 1) {
    throw new DomainError('STALE_ATTEMPT', `attempt ${attemptId} is no gang's that waits`);
  }
  const ending = { durationMs: 0, now, jitter, policy: DEFAULT_BACKOFF };
  const since = Date.parse(attempt.brokenAt ?? attempt.assignedAt);
  if (now.getTime() - since < acceptMs) {
    throw new DomainError('INVALID_TRANSITION', `attempt ${attemptId} may still go on`);
  }
  if (gangBroken(state, attempt)) return endGang(state, attempt, attempt.memberEnds, ending, true);
  if (attempt.status !== 'assigned') {
    throw new DomainError('STALE_ATTEMPT', `every member of attempt ${attemptId} started`);
  }
  const missing = membersOf(attempt).filter((m) => !attempt.ranksStarted.includes(m.rank));
  const ranks = missing.map((m) => m.rank);
  const why = failure(
    'gangIncomplete',
    `${ranks.length === 1 ? 'rank' : 'ranks'} ${ranks.join(', ')} did not start within ${Math.round(acceptMs / 1000)}s of the assignment`,
  );
  return endMember(
    state,
    attempt,
    missing[0]!,
    { ...ending, failure: why, exitCode: null },
    {},
    true,
  );
}
