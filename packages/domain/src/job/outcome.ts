/** How a job ends: the events that end it, and what each makes of it. */
import type { JobEvent, JobStatus } from '@trainyard/events';

/** Whether this event ends its job: nothing can follow it. */
export function endsJob(event: JobEvent): boolean {
  switch (event.type) {
    case 'JobSucceeded':
    case 'JobCancelled':
    case 'JobBuildFailed':
    case 'JobDependencyFailed':
    case 'JobShardsEnded':
      return true;
    case 'JobAttemptFailed':
      return event.data.retry === null;
    default:
      return false;
  }
}

/** How an event that ends its job ended it. */
export function outcomeOf(event: JobEvent): JobStatus {
  if (event.type === 'JobShardsEnded') return event.data.status;
  if (event.type === 'JobSucceeded') return 'succeeded';
  return event.type === 'JobCancelled' ? 'cancelled' : 'failed';
}
