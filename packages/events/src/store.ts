import { randomUUID } from 'node:crypto';
import type {
  ConsumerMessages,
  JetStreamApiError,
  JetStreamClient,
  JetStreamManager,
  JsMsg,
  MsgRequest,
  NextMsgRequest,
} from '@nats-io/jetstream';
import { DeliverPolicy } from '@nats-io/jetstream';
import { isKnownEventType, parseEvent, type Aggregate, type AggregateEvents } from './catalog.ts';
import type { AggregateHead, AppendMeta, Envelope, StoredEvent } from './envelope.ts';
import { EMPTY_HEAD, SCHEMA_VERSION } from './envelope.ts';
import { ConcurrencyError, CorruptEventError, EventStoreError } from './errors.ts';
import { hashEvent } from './hash.ts';
import type { EventSigner } from './signing.ts';
import { getStoredMessage, isTransient, retry, retryTransient } from './retry.ts';
import { Streams, Subjects } from './subjects.ts';

const WRONG_LAST_SEQUENCE = 10071;
const PUBLISH_TIMEOUT_MS = 5_000;
const PUBLISH_ATTEMPTS = 10;

export interface AppendInput<A extends Aggregate> {
  aggregate: A;
  aggregateId: string;
  /** The head the decision was made on; the append fails if the aggregate moved since. */
  head: AggregateHead;
  events: readonly AggregateEvents[A][];
  meta: AppendMeta;
  /** Event ids to use, for appends that must be idempotent across retries. */
  ids?: readonly string[];
}

export interface AppendResult<A extends Aggregate> {
  events: StoredEvent<AggregateEvents[A]>[];
  head: AggregateHead;
}

export interface LoadedAggregate<A extends Aggregate> {
  events: StoredEvent<AggregateEvents[A]>[];
  head: AggregateHead;
}

/** Decodes one message of the event stream. */
export function decodeEvent(msg: { seq: number; string(): string }): StoredEvent {
  let parsed: Envelope;
  try {
    parsed = JSON.parse(msg.string()) as Envelope;
  } catch (cause) {
    throw new CorruptEventError(msg.seq, 'not JSON', { cause });
  }
  if (!isKnownEventType(parsed.type)) {
    throw new CorruptEventError(msg.seq, `unknown event type "${String(parsed.type)}"`);
  }
  return { ...parsed, seq: msg.seq };
}

/**
 * The event log. Appends are idempotent (the event id is the `Nats-Msg-Id`) and guarded by
 * the aggregate's last subject sequence, so two writers cannot both extend one aggregate.
 */
export class EventStore {
  #storedSeq = 0;

  constructor(
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    /** Signs every event this store appends; without one, events go unsigned. */
    readonly signer: EventSigner | null = null,
  ) {}

  /**
   * The highest sequence this store has seen the log hold: an append's, or an event's it read
   * (0 before either). Every event up to it was in the log when it was seen, so a look at the log
   * that starts later finds them all: what a reader can use instead of asking for the newest.
   */
  get storedSeq(): number {
    return this.#storedSeq;
  }

  #saw(seq: number): void {
    if (seq > this.#storedSeq) this.#storedSeq = seq;
  }

  /** Appends events to one aggregate in order, each guarded by the one before it. */
  async append<A extends Aggregate>(input: AppendInput<A>): Promise<AppendResult<A>> {
    const subject = Subjects.event(input.aggregate, input.aggregateId);
    const correlationId = input.meta.correlationId ?? randomUUID();
    let head = input.head;
    const stored: StoredEvent<AggregateEvents[A]>[] = [];
    for (const [i, raw] of input.events.entries()) {
      const event = parseEvent(input.aggregate, raw);
      const unhashed = {
        id: input.ids?.[i] ?? randomUUID(),
        type: event.type,
        schemaVersion: SCHEMA_VERSION,
        aggregate: input.aggregate,
        aggregateId: input.aggregateId,
        occurredAt: input.meta.now.toISOString(),
        actor: input.meta.actor,
        correlationId,
        causationId: input.meta.causationId ?? null,
        prevHash: head.hash,
        data: event.data,
      } as unknown as Omit<Envelope<AggregateEvents[A]>, 'hash'>;
      const hash = hashEvent(unhashed);
      const envelope = {
        ...unhashed,
        hash,
        ...(this.signer && { signature: this.signer.sign(hash) }),
      } as Envelope<AggregateEvents[A]>;
      const seq = await this.#publish(subject, envelope, head.seq);
      stored.push({ ...envelope, seq } as unknown as StoredEvent<AggregateEvents[A]>);
      head = { seq, hash: envelope.hash };
    }
    return { events: stored, head };
  }

  /**
   * Publishes one event. A publish whose answer is lost (a timeout, a cluster electing a new
   * leader) is sent again with the same msg id, so it lands at most once; the retries are
   * bounded and then the error is the caller's.
   */
  async #publish(subject: string, envelope: Envelope, expectedSeq: number): Promise<number> {
    const payload = JSON.stringify(envelope);
    const publish = () =>
      this.js.publish(subject, payload, {
        msgID: envelope.id,
        expect: { lastSubjectSequence: expectedSeq },
        timeout: PUBLISH_TIMEOUT_MS,
      });
    try {
      const ack = await retry(publish, { attempts: PUBLISH_ATTEMPTS, retryable: isTransient });
      this.#saw(ack.seq);
      return ack.seq;
    } catch (err) {
      if ((err as JetStreamApiError).code === WRONG_LAST_SEQUENCE) {
        throw new ConcurrencyError(subject, expectedSeq, { cause: err });
      }
      throw new EventStoreError('EVENT_LOG_UNAVAILABLE', `could not append to ${subject}`, {
        cause: err,
      });
    }
  }

  /** The last sequence and hash of an aggregate, without reading its history. */
  async head(aggregate: Aggregate, id: string): Promise<AggregateHead> {
    const last = await this.last(aggregate, id);
    return last ? { seq: last.seq, hash: last.hash } : EMPTY_HEAD;
  }

  /** An aggregate's newest event (one direct read), or null when it has none. */
  last(aggregate: Aggregate, id: string): Promise<StoredEvent | null> {
    return this.#last(Subjects.event(aggregate, id));
  }

  async #last(subject: string): Promise<StoredEvent | null> {
    return this.#get(`read the last event of ${subject}`, { last_by_subj: subject });
  }

  /** One message of the event stream, or null when there is none (a direct request). */
  async #get(what: string, request: MsgRequest | NextMsgRequest): Promise<StoredEvent | null> {
    const msg = await getStoredMessage(this.jsm, Streams.events, request, what);
    if (!msg) return null;
    this.#saw(msg.seq);
    return decodeEvent({ seq: msg.seq, string: () => new TextDecoder().decode(msg.data) });
  }

  /**
   * Reads every event of one aggregate, in order. It walks the subject with direct requests
   * (`next_by_subj`) instead of creating a consumer: an aggregate holds few events, and a consumer's creation
   * goes through the cluster's meta leader, which may place it on a server that is down.
   */
  async load<A extends Aggregate>(aggregate: A, id: string): Promise<LoadedAggregate<A>> {
    const subject = Subjects.event(aggregate, id);
    const last = await this.#last(subject);
    if (!last) return { events: [], head: EMPTY_HEAD };
    const events: StoredEvent<AggregateEvents[A]>[] = [];
    for (let seq = 1; seq < last.seq;) {
      const next = await this.#get(`read ${subject}`, { seq, next_by_subj: subject });
      if (!next || next.seq >= last.seq) break;
      events.push(next as StoredEvent<AggregateEvents[A]>);
      seq = next.seq + 1;
    }
    events.push(last as StoredEvent<AggregateEvents[A]>);
    return { events, head: { seq: last.seq, hash: last.hash } };
  }

  /** Whether the log holds an event after `seq` (matching `filter`, default every event). */
  async hasAfter(seq: number, filter: string = Subjects.allEvents): Promise<boolean> {
    return (await this.nextAfter(seq, filter)) !== null;
  }

  /**
   * The first event after `seq` that matches `filter` (one direct read), or null: for walking a
   * few events of a kind that is rare in the log.
   */
  nextAfter(seq: number, filter: string = Subjects.allEvents): Promise<StoredEvent | null> {
    return this.#get('read the event log', { seq: seq + 1, next_by_subj: filter });
  }

  /** The sequence of the newest event in the log (0 when it is empty). */
  async lastSeq(): Promise<number> {
    const info = await retryTransient("read the event log's state", () =>
      this.jsm.streams.info(Streams.events),
    );
    this.#saw(info.state.last_seq);
    return info.state.last_seq;
  }

  /**
   * An ordered reader of the log (or of `filter`) from `fromSeq` on. Its creation is tried again
   * after a transient error: on a 2.9 cluster with a server down, about one creation in three
   * is placed on that server and never answers.
   */
  reader(opts: {
    fromSeq: number;
    filter?: string;
    maxMessages?: number;
  }): Promise<ConsumerMessages> {
    return retryTransient('read the event log', async () => {
      const consumer = await this.js.consumers.get(Streams.events, {
        filter_subjects: opts.filter ?? Subjects.allEvents,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: opts.fromSeq,
      });
      return consumer.consume({ max_messages: opts.maxMessages ?? 1024 });
    });
  }

  /**
   * Reads the log in order from `fromSeq`, stopping after `untilSeq` (default: the newest event
   * when the call starts). Use `follow` for a tail that never ends until `signal` aborts.
   */
  async *replay(
    opts: {
      fromSeq?: number;
      untilSeq?: number;
      filter?: string;
      follow?: boolean;
      signal?: AbortSignal;
    } = {},
  ): AsyncGenerator<StoredEvent> {
    const until = opts.follow ? Infinity : (opts.untilSeq ?? (await this.lastSeq()));
    const from = opts.fromSeq ?? 1;
    if (from > until) return;
    const messages = await this.reader({
      fromSeq: from,
      ...(opts.filter && { filter: opts.filter }),
      maxMessages: 2048,
    });
    const stop = () => messages.stop();
    opts.signal?.addEventListener('abort', stop, { once: true });
    if (opts.signal?.aborted) stop();
    try {
      for await (const msg of messages) {
        if (msg.seq > until) break;
        yield decodeEvent(msg as JsMsg);
        if (msg.seq >= until) break;
      }
    } finally {
      opts.signal?.removeEventListener('abort', stop);
      messages.stop();
    }
  }
}
