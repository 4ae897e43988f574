/**
 * How an attempt ends: succeeded, failed (retried after a backoff, or the end of the job),
 * cancelled, past its time limit, preempted; for a gang job's attempt, with the first of its
 * members to fail, or once every member succeeded.
 */
import type { Failure, JobEvent } from '@trainyard/events';
import { backoffMs, type BackoffPolicy, DEFAULT_BACKOFF } from '../backoff.ts';
import { DomainError } from '../errors.ts';
import { failure as failureOf } from '../failures.ts';
import {
  gangSize,
  incompleteGang,
  MAX_GANG_INCOMPLETE,
  memberOf,
  othersSucceeded,
  type Member,
} from './gang.ts';
import { preemptedAttempt } from './stops.ts';
import { currentAttempt, isTerminal, type AttemptState, type JobState } from './state.ts';

/** Failures that queue a job again without spending one of its retries. */
const FREE_RETRIES = new Set(['preempted', 'gangIncomplete']);

/**
 * The live attempt that `id` names (its own id, or one of its gang members'), and the member;
 * throws `STALE_ATTEMPT` when it no longer holds the job.
 */
export function liveMember(state: JobState, id: string): { attempt: AttemptState; member: Member } {
  const found = memberOf(state, id);
  const attempt = currentAttempt(state);
  if (
    !found ||
    found.attempt !== attempt ||
    attempt.finishedAt !== null ||
    isTerminal(state.status)
  ) {
    throw new DomainError('STALE_ATTEMPT', `attempt ${id} no longer holds job ${state.id}`);
  }
  return found;
}

/** The live attempt that `id` names; see `liveMember`. */
export function liveAttempt(state: JobState, id: string): AttemptState {
  return liveMember(state, id).attempt;
}

/** How an attempt came to end, beyond its exit. */
export interface EndedHow {
  /** It ended by itself within the time limit, as its worker timed it. */
  endedInTime?: boolean;
  /** Its worker stopped it when asked to. */
  stopped?: boolean;
  /** Its worker stopped it past the time limit, no stop having come from the control plane. */
  pastLimit?: boolean;
}

/**
 * What the end of the attempt (or gang member) `id` means. For a gang, a failure names the
 * member, and a member that succeeded while others run is recorded as such.
 */
export function endAttempt(
  state: JobState,
  id: string,
  failure: Failure | null,
  exitCode: number | null,
  durationMs: number,
  now: Date,
  jitter: number,
  policy: BackoffPolicy,
  how: EndedHow = {},
): JobEvent[] {
  const { attempt, member } = liveMember(state, id);
  const attemptId = attempt.id;
  if (state.cancelRequested) return [{ type: 'JobCancelled', data: { attemptId } }];
  if ((state.timeLimitReached || how.pastLimit) && !how.endedInTime) {
    const limit = failureOf(
      'timeLimit',
      `the attempt ran past the job's time limit of ${state.spec?.timeLimit}s`,
    );
    const data = { attemptId, exitCode, failure: limit, durationMs, retry: null };
    return [{ type: 'JobAttemptFailed', data }];
  }
  // Stopped for work of a higher priority (a script that checkpoints on SIGTERM may exit 0):
  // queued again at once, without spending a retry; one that succeeded by itself succeeded.
  if (state.preemptRequested && (failure || how.stopped)) {
    return [preemptedAttempt(attemptId, exitCode, durationMs, now)];
  }
  const gang = gangSize(attempt) > 1;
  if (!failure) {
    if (gang && !othersSucceeded(attempt, member.rank)) {
      return [{ type: 'JobMemberSucceeded', data: { attemptId, rank: member.rank, durationMs } }];
    }
    return [{ type: 'JobSucceeded', data: { attemptId, durationMs } }];
  }
  const why = gang
    ? { ...failure, message: `rank ${member.rank} (worker ${member.workerId}): ${failure.message}` }
    : failure;
  const retriesUsed = state.attempts.filter(
    (a) => a.failure?.retryable && !FREE_RETRIES.has(a.failure.reason),
  ).length;
  const maxRetries = state.spec?.maxRetries ?? 0;
  const wait = backoffMs(attempt.number, jitter, policy);
  const retry =
    why.retryable && retriesUsed < maxRetries
      ? { retryAt: new Date(now.getTime() + wait).toISOString(), backoffMs: wait }
      : null;
  return [
    { type: 'JobAttemptFailed', data: { attemptId, exitCode, failure: why, durationMs, retry } },
  ];
}

/**
 * Ends a gang's attempt whose members did not all start within `acceptMs`: each is released,
 * and the job is queued again after a backoff without spending a retry, up to
 * `MAX_GANG_INCOMPLETE` times; then it fails.
 */
export function abandonGang(
  state: JobState,
  attemptId: string,
  now: Date,
  acceptMs: number,
  jitter: number,
): JobEvent[] {
  const { attempt, missing } = incompleteGang(state, attemptId, now, acceptMs);
  if (state.cancelRequested) return [{ type: 'JobCancelled', data: { attemptId } }];
  const tries = state.attempts.filter((a) => a.failure?.reason === 'gangIncomplete').length + 1;
  const ranks = `${missing.length === 1 ? 'rank' : 'ranks'} ${missing.join(', ')}`;
  const again = tries < MAX_GANG_INCOMPLETE;
  const why = failureOf(
    'gangIncomplete',
    `${ranks} did not start within ${Math.round(acceptMs / 1000)}s of the assignment` +
      (again ? '' : `, ${tries} times: the job is not queued again`),
  );
  const wait = backoffMs(attempt.number, jitter, DEFAULT_BACKOFF);
  const retry = again
    ? { retryAt: new Date(now.getTime() + wait).toISOString(), backoffMs: wait }
    : null;
  return [
    {
      type: 'JobAttemptFailed',
      data: { attemptId, exitCode: null, failure: why, durationMs: 0, retry },
    },
  ];
}
