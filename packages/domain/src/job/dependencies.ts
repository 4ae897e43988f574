/**
 * Dependencies between jobs (`dependsOn`): a job waits until every job it names has succeeded,
 * and fails without running as soon as one of them failed, was cancelled or does not exist.
 */
import type { JobEvent, JobStatus } from '@trainyard/events';
import { DomainError } from '../errors.ts';
import { failure } from '../failures.ts';
import { isTerminal, type JobState } from './state.ts';

/** How the jobs this one depends on stand, as the log has them (`none`: not in the log). */
export function decideDependencies(
  state: JobState,
  outcomes: Record<string, JobStatus | 'none'>,
): JobEvent[] {
  if (isTerminal(state.status)) {
    throw new DomainError('JOB_FINISHED', `job ${state.id} already ${state.status}`);
  }
  if (state.dependenciesMet) return [];
  const dependsOn = state.spec?.dependsOn ?? [];
  for (const dependency of dependsOn) {
    const status = outcomes[dependency];
    if (status === 'failed' || status === 'cancelled' || status === 'none') {
      const why =
        status === 'none' ? `job ${dependency} does not exist` : `job ${dependency} ${status}`;
      const failed = failure(
        'dependencyFailed',
        `${why}: this job, which depends on it, never ran`,
      );
      return [{ type: 'JobDependencyFailed', data: { dependency, status, failure: failed } }];
    }
  }
  return dependsOn.every((d) => outcomes[d] === 'succeeded')
    ? [{ type: 'JobDependenciesMet', data: {} }]
    : [];
}
