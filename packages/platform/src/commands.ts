import {
  ConcurrencyError,
  type AggregateHead,
  type AppendMeta,
  type EventStore,
  type JobEvent,
  type StoredEvent,
} from '@trainyard/events';
import {
  decideJob,
  evolveJob,
  initialJobState,
  type JobCommand,
  type JobState,
} from '@trainyard/domain';

/** A job's state together with the head it was folded up to. */
export interface JobSnapshot {
  state: JobState;
  head: AggregateHead;
}

export interface CommandResult extends JobSnapshot {
  events: StoredEvent<JobEvent>[];
}

const MAX_CONFLICT_RETRIES = 8;

/** Folds stored events onto a snapshot. */
export function foldJob(
  snapshot: JobSnapshot,
  events: readonly StoredEvent<JobEvent>[],
): JobSnapshot {
  let state = snapshot.state;
  for (const e of events) state = evolveJob(state, e, e.occurredAt);
  const last = events[events.length - 1];
  return { state, head: last ? { seq: last.seq, hash: last.hash } : snapshot.head };
}

/** Reads a job from the log. */
export async function loadJob(store: EventStore, jobId: string): Promise<JobSnapshot> {
  return (await loadJobHistory(store, jobId)).snapshot;
}

/** Reads a job from the log, keeping its events too. */
export async function loadJobHistory(
  store: EventStore,
  jobId: string,
): Promise<{ snapshot: JobSnapshot; events: StoredEvent<JobEvent>[] }> {
  const { events, head } = await store.load('job', jobId);
  return {
    snapshot: { ...foldJob({ state: initialJobState(jobId), head }, events), head },
    events,
  };
}

/**
 * Runs a command against a job: decide on the snapshot (or the log), append at its head, and on
 * a conflict reload and decide again, a bounded number of times. Domain rejections propagate.
 */
export async function runJobCommand(
  store: EventStore,
  jobId: string,
  command: JobCommand | ((state: JobState) => JobCommand),
  meta: AppendMeta,
  opts: { snapshot?: JobSnapshot; ids?: string[] } = {},
): Promise<CommandResult> {
  let snapshot = opts.snapshot ?? (await loadJob(store, jobId));
  for (let attempt = 0; ; attempt++) {
    const cmd = typeof command === 'function' ? command(snapshot.state) : command;
    const decided = decideJob(cmd, snapshot.state);
    if (decided.length === 0) return { ...snapshot, events: [] };
    try {
      const appended = await store.append({
        aggregate: 'job',
        aggregateId: jobId,
        head: snapshot.head,
        events: decided,
        meta,
        ...(attempt === 0 && opts.ids && { ids: opts.ids }),
      });
      return { ...foldJob(snapshot, appended.events), events: appended.events };
    } catch (err) {
      if (!(err instanceof ConcurrencyError) || attempt >= MAX_CONFLICT_RETRIES) throw err;
      snapshot = await loadJob(store, jobId);
    }
  }
}
