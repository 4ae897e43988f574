/**
 * How an attempt ends: succeeded, failed (retried after a backoff, or the end of the job),
 * cancelled, past its time limit, preempted; for a gang job's attempt, once each of its members
 * that started has ended.
 */
import type { JobEvent } from '@trainyard/events';
import { backoffMs } from '../backoff.ts';
import { DomainError } from '../errors.ts';
import { failure as failureOf, FREE_RETRIES } from '../failures.ts';
import { gangSize, MAX_GANG_INCOMPLETE, memberOf, membersOf, type Member } from './gang.ts';
import { isService, restartService, type AttemptEnding } from './service.ts';
import { preemptedAttempt } from './stops.ts';
import {
  currentAttempt,
  isTerminal,
  type AttemptState,
  type JobState,
  type MemberEnd,
} from './state.ts';

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
 * What the end of the attempt (or gang member) `id` means. A gang's member that ended while
 * others run is recorded (`JobMemberEnded`); the attempt ends with the last.
 */
export function endAttempt(
  state: JobState,
  id: string,
  ending: AttemptEnding,
  how: EndedHow = {},
): JobEvent[] {
  const { attempt, member } = liveMember(state, id);
  if (gangSize(attempt) === 1) return endWhole(state, attempt, ending, how);
  return endMember(state, attempt, member, ending, how);
}

/** Whether a gang's members are being stopped: one failed, a cancel, the time limit. */
export function gangBroken(state: JobState, attempt: AttemptState): boolean {
  return attempt.brokenAt !== null || state.cancelRequested || state.timeLimitReached;
}

/**
 * The members of a gang's attempt yet to end: each that has not, but, once its members are
 * being stopped, one that never started (it never will).
 */
export function membersRunning(
  attempt: AttemptState,
  ends: readonly MemberEnd[],
  broken: boolean,
): Member[] {
  return membersOf(attempt).filter(
    (m) =>
      !ends.some((e) => e.rank === m.rank) && (!broken || attempt.ranksStarted.includes(m.rank)),
  );
}

/**
 * A member of a gang ended: recorded, or, the last of those that started, the attempt's end. Its
 * failure names it, unless `gangWide` (the failure is the gang's, such as `gangIncomplete`).
 */
export function endMember(
  state: JobState,
  attempt: AttemptState,
  member: Member,
  ending: AttemptEnding,
  how: EndedHow,
  gangWide = false,
): JobEvent[] {
  // An end said twice (its first answer lost on the way back) is the end already recorded.
  if (attempt.memberEnds.some((e) => e.rank === member.rank)) return [];
  const failure =
    ending.failure && !gangWide
      ? {
          ...ending.failure,
          message: `rank ${member.rank} (worker ${member.workerId}): ${ending.failure.message}`,
        }
      : ending.failure;
  const timeLimited = how.pastLimit === true;
  const stopped = how.stopped === true || timeLimited;
  const end: MemberEnd = {
    rank: member.rank,
    exitCode: ending.exitCode,
    failure,
    durationMs: ending.durationMs,
    stopped,
    timeLimited,
  };
  const ends = [...attempt.memberEnds, end];
  const broken = gangBroken(state, attempt) || failure !== null || timeLimited;
  if (membersRunning(attempt, ends, broken).length > 0) {
    const data = {
      attemptId: attempt.id,
      rank: member.rank,
      exitCode: ending.exitCode,
      failure,
      durationMs: ending.durationMs,
      ...(timeLimited && { timeLimited: true as const }),
      ...(stopped && { stopped: true as const }),
    };
    return [{ type: 'JobMemberEnded', data }];
  }
  return endGang(state, attempt, ends, ending);
}

/**
 * A gang's attempt ends as its members did: failed as the first to fail (one the platform
 * failed, such as a member lost with its worker, before any other: the others fail for want of
 * it), else succeeded. It ended within its time limit only if every member ended by itself
 * within it; `givenUp`: members told to stop did not all answer.
 */
export function endGang(
  state: JobState,
  attempt: AttemptState,
  ends: readonly MemberEnd[],
  ending: Omit<AttemptEnding, 'failure' | 'exitCode'>,
  givenUp = false,
): JobEvent[] {
  const failed = ends.find((e) => e.failure?.kind === 'system') ?? ends.find((e) => e.failure);
  const limitMs = (state.spec?.timeLimit ?? Infinity) * 1000;
  return endWhole(
    state,
    attempt,
    { ...ending, failure: failed?.failure ?? null, exitCode: failed?.exitCode ?? null },
    {
      pastLimit: ends.some((e) => e.timeLimited),
      stopped: givenUp || ends.some((e) => e.stopped),
      endedInTime: !givenUp && ends.every((e) => !e.stopped && e.durationMs < limitMs),
    },
  );
}

/** The end of an attempt, as a whole. */
function endWhole(
  state: JobState,
  attempt: AttemptState,
  { failure, exitCode, durationMs, now, jitter, policy }: AttemptEnding,
  how: EndedHow,
): JobEvent[] {
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
  if (isService(state.spec)) {
    return [restartService(state, attempt, { failure, exitCode, durationMs, now, jitter, policy })];
  }
  if (!failure) return [{ type: 'JobSucceeded', data: { attemptId, durationMs } }];
  const retriesUsed = state.attempts.filter(
    (a) => a.failure?.retryable && !FREE_RETRIES.has(a.failure.reason),
  ).length;
  const incomplete = state.attempts.filter((a) => a.failure?.reason === 'gangIncomplete').length;
  let why = failure;
  let again = failure.retryable && retriesUsed < (state.spec?.maxRetries ?? 0);
  if (failure.reason === 'gangIncomplete') {
    again = incomplete + 1 < MAX_GANG_INCOMPLETE;
    if (!again)
      why = {
        ...failure,
        message: `${failure.message}, ${incomplete + 1} times: not queued again`,
      };
  }
  const wait = backoffMs(attempt.number, jitter, policy);
  const retry = again
    ? { retryAt: new Date(now.getTime() + wait).toISOString(), backoffMs: wait }
    : null;
  return [
    { type: 'JobAttemptFailed', data: { attemptId, exitCode, failure: why, durationMs, retry } },
  ];
}
