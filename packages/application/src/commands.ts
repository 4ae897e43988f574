import {
  ConcurrencyError,
  EMPTY_HEAD,
  retry,
  type RetryPolicy,
  type AggregateHead,
  type AppendMeta,
  type EventStore,
  type JobEvent,
  type StoredEvent,
  type WorkerEvent,
} from '@trainyard/events';
import {
  decideJob,
  decideWorker,
  evolveJob,
  evolveWorker,
  initialJobState,
  initialWorker,
  type JobCommand,
  type JobState,
  type WorkerCommand,
  type WorkerLifecycle,
} from '@trainyard/domain';

/** A job's state together with the head it was folded up to. */
export interface JobSnapshot {
  state: JobState;
  head: AggregateHead;
}

export interface CommandResult extends JobSnapshot {
  events: StoredEvent<JobEvent>[];
}

/** A conflict is decided again at once on the reloaded state, a bounded number of times. */
export const CONFLICTS: RetryPolicy = {
  attempts: 9,
  baseMs: 0,
  retryable: (err) => err instanceof ConcurrencyError,
};

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
  return retry(async (attempt) => {
    if (attempt > 1) snapshot = await loadJob(store, jobId);
    const cmd = typeof command === 'function' ? command(snapshot.state) : command;
    const decided = decideJob(cmd, snapshot.state);
    if (decided.length === 0) return { ...snapshot, events: [] };
    const appended = await store.append({
      aggregate: 'job',
      aggregateId: jobId,
      head: snapshot.head,
      events: decided,
      meta,
      ...(attempt === 1 && opts.ids && { ids: opts.ids }),
    });
    return { ...foldJob(snapshot, appended.events), events: appended.events };
  }, CONFLICTS);
}

/** A worker's state together with the head it was read at. */
export interface WorkerSnapshot {
  state: WorkerLifecycle;
  head: AggregateHead;
}

/** Reads a worker from the log: its state follows from its last event alone. */
export async function loadWorker(store: EventStore, workerId: string): Promise<WorkerSnapshot> {
  const last = await store.last('worker', workerId);
  if (!last) return { state: initialWorker, head: EMPTY_HEAD };
  return {
    state: evolveWorker(initialWorker, last as StoredEvent<WorkerEvent>),
    head: { seq: last.seq, hash: last.hash },
  };
}

/**
 * Runs a command against a worker: decide on the snapshot given (or the log), append at its
 * head, and on a conflict read it again and decide again, a bounded number of times. With
 * `decideAgain: false` a conflict is the caller's (`ConcurrencyError`): for a command decided
 * on what the caller saw, such as a silence that a new registration ends.
 */
export async function runWorkerCommand(
  store: EventStore,
  workerId: string,
  command: WorkerCommand,
  meta: AppendMeta,
  opts: { snapshot?: WorkerSnapshot; decideAgain?: boolean } = {},
): Promise<{ snapshot: WorkerSnapshot; events: StoredEvent<WorkerEvent>[] }> {
  return retry(
    async (attempt) => {
      const snapshot =
        attempt === 1 && opts.snapshot ? opts.snapshot : await loadWorker(store, workerId);
      const decided = decideWorker(command, snapshot.state);
      if (decided.length === 0) return { snapshot, events: [] };
      const appended = await store.append({
        aggregate: 'worker',
        aggregateId: workerId,
        head: snapshot.head,
        events: decided,
        meta,
      });
      let state = snapshot.state;
      for (const e of appended.events) state = evolveWorker(state, e);
      return { snapshot: { state, head: appended.head }, events: appended.events };
    },
    opts.decideAgain === false ? { attempts: 1 } : CONFLICTS,
  );
}
