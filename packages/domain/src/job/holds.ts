/**
 * Holds on a job, like Slurm's `hold` and `release`: a held job that waits is not placed. Its
 * owner or an admin holds it; an admin's hold stands over its owner's, and only an admin lifts it.
 */
import type { HoldBy, JobEvent } from '@trainyard/events';
import { DomainError } from '../errors.ts';
import { awaitsSharding } from './shards.ts';
import { isTerminal, slotHolder, type JobState } from './state.ts';

function refuseEnded(state: JobState): void {
  if (isTerminal(state.status))
    throw new DomainError('JOB_FINISHED', `job ${state.id} already ${state.status}`);
}

/** Holds a job that waits (or whose probe runs); one that runs is refused. */
export function decideHold(state: JobState, by: HoldBy, reason: string): JobEvent[] {
  refuseEnded(state);
  if (state.shardCount > 0 || awaitsSharding(state)) {
    throw new DomainError(
      'INVALID_TRANSITION',
      `job ${state.id} is an array job that runs as its shards from now: hold its shards (${state.id}_0 …)`,
    );
  }
  const attempt = slotHolder(state);
  if (attempt && !attempt.probe) {
    throw new DomainError(
      'INVALID_TRANSITION',
      `job ${state.id} is ${state.status}: a hold keeps a waiting job from starting; cancel one that runs`,
    );
  }
  // A hold already there stands, unless an admin puts theirs over its owner's.
  if (state.held && (state.held.by === 'admin' || by === 'owner')) return [];
  return [{ type: 'JobHeld', data: { by, reason } }];
}

/** Lifts a job's hold; its owner may not lift an admin's. */
export function decideRelease(state: JobState, by: HoldBy): JobEvent[] {
  refuseEnded(state);
  if (!state.held) return [];
  if (state.held.by === 'admin' && by !== 'admin') {
    const why = state.held.reason ? ` (${state.held.reason})` : '';
    throw new DomainError(
      'HELD_BY_ADMIN',
      `an admin holds job ${state.id}${why}: only an admin may release it`,
    );
  }
  return [{ type: 'JobReleased', data: {} }];
}
