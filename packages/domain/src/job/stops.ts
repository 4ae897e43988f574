/**
 * Stops of a job's running attempt from outside it: its time limit (the job then fails as
 * `timeLimit`), and preemption for waiting work of a higher priority (the job is queued again
 * at once, without spending a retry).
 */
import type { JobEvent } from '@trainyard/events';
import { DomainError } from '../errors.ts';
import { failure } from '../failures.ts';
import { gangSize } from './gang.ts';
import { slotHolder, timeLimitDeadline, type JobState } from './state.ts';

/** Stops the running attempt of a preemptible job to make room for `by`; once. */
export function decidePreempt(state: JobState, attemptId: string, by: string): JobEvent[] {
  const attempt = slotHolder(state);
  if (!attempt || attempt.id !== attemptId) {
    throw new DomainError('STALE_ATTEMPT', `attempt ${attemptId} no longer holds the job`);
  }
  if (!state.spec?.preemptible || attempt.probe || gangSize(attempt) > 1) {
    throw new DomainError('INVALID_TRANSITION', `job ${state.id} is not preemptible`);
  }
  if (state.preemptRequested || state.cancelRequested || state.timeLimitReached) return [];
  return [
    { type: 'JobPreempted', data: { attemptId: attempt.id, workerId: attempt.workerId, by } },
  ];
}

/** An attempt ended by a preemption: the job is queued again at once, no retry spent. */
export function preemptedAttempt(
  attemptId: string,
  exitCode: number | null,
  durationMs: number,
  now: Date,
): JobEvent {
  const why = failure('preempted', 'stopped to make room for work of a higher priority');
  const retry = { retryAt: now.toISOString(), backoffMs: 0 };
  return {
    type: 'JobAttemptFailed',
    data: { attemptId, exitCode, failure: why, durationMs, retry },
  };
}

/** Stops the running attempt once it has run the job's time limit; `now` is the clock's. */
export function decideTimeLimit(state: JobState, now: Date): JobEvent[] {
  if (state.timeLimitReached) return [];
  const deadline = timeLimitDeadline(state);
  const attempt = slotHolder(state);
  if (deadline === null || !attempt) {
    throw new DomainError('INVALID_TRANSITION', `job ${state.id} runs nothing with a time limit`);
  }
  if (deadline > now.getTime()) {
    throw new DomainError('INVALID_TRANSITION', `job ${state.id} has not reached its time limit`);
  }
  const data = {
    attemptId: attempt.id,
    workerId: attempt.workerId,
    timeLimit: state.spec!.timeLimit!,
  };
  return [{ type: 'JobTimeLimitReached', data }];
}
