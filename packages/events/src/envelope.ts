import type { Actor } from './common.ts';
import type { EventSignature } from './signing.ts';
import type { Aggregate, AggregateEvents, DomainEvent } from './catalog.ts';

export const SCHEMA_VERSION = 1;
/** The `prevHash` of the first event of every aggregate. */
export const GENESIS_HASH = '0'.repeat(64);

/** What every event carries besides its `type` and `data`. */
export interface EnvelopeMeta {
  id: string;
  schemaVersion: number;
  aggregate: Aggregate;
  aggregateId: string;
  occurredAt: string;
  actor: Actor;
  correlationId: string;
  causationId: string | null;
  prevHash: string;
  hash: string;
  /** The appending identity's signature of `hash`; outside what the hash covers. */
  signature?: EventSignature;
}

/** An event as it is written to the log. */
export type Envelope<E extends DomainEvent = DomainEvent> = E & EnvelopeMeta;

/** An event read back from the log, with its stream sequence. */
export type StoredEvent<E extends DomainEvent = DomainEvent> = Envelope<E> & { seq: number };

/** Where an aggregate's chain ends: the stream sequence and hash of its last event. */
export interface AggregateHead {
  seq: number;
  hash: string;
}

export const EMPTY_HEAD: AggregateHead = { seq: 0, hash: GENESIS_HASH };

/** Who and why, for a batch of events appended together. */
export interface AppendMeta {
  actor: Actor;
  now: Date;
  correlationId?: string;
  causationId?: string | null;
}

/** Narrows an event to one aggregate's events. */
export function ofAggregate<A extends Aggregate>(
  event: StoredEvent,
  aggregate: A,
): event is StoredEvent & StoredEvent<AggregateEvents[A]> {
  return event.aggregate === aggregate;
}
