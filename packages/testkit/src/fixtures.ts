import type { Aggregate, AppendMeta, JobEvent, StoredEvent } from '@trainyard/events';

/** A valid `JobSubmitted`, for tests that need a job in the log and nothing more. */
export const jobSubmitted = (owner = 'alice'): JobEvent => ({
  type: 'JobSubmitted',
  data: {
    owner,
    spec: {
      name: 'n',
      command: 'true',
      resources: { gpus: 0 },
      priority: 0,
      maxRetries: 3,
      env: {},
    },
  },
});

/** Append metadata of a test acting as a service, at `now`. */
export const testMeta = (now = new Date()): AppendMeta => ({
  actor: { kind: 'service', id: 'test' },
  now,
});

/**
 * `event` as the log would hand it back at `seq`, for folds tested without a log: an envelope
 * whose hash and id follow from `seq`.
 */
export function storedEvent<E extends { type: string; data: unknown }>(
  aggregate: Aggregate,
  id: string,
  event: E,
  opts: { seq: number; at: Date },
): StoredEvent {
  const { seq, at } = opts;
  return {
    ...event,
    id: `e${seq}`,
    schemaVersion: 1,
    aggregate,
    aggregateId: id,
    occurredAt: at.toISOString(),
    actor: { kind: 'service', id: 'test' },
    correlationId: 'c',
    causationId: null,
    prevHash: '',
    hash: `h${seq}`,
    seq,
  } as unknown as StoredEvent;
}
