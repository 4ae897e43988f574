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
import { processHistories, type Histories, type History } from './histories.ts';
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

/** An event read from the log, with its size there. */
interface Sized {
  event: StoredEvent;
  bytes: number;
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
    /** The histories it reads on from and keeps what it reads and appends in. */
    readonly histories: Histories = processHistories,
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
    const kept: StoredEvent[] = [];
    let bytes = 0;
    let landedBefore = false;
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
      const payload = JSON.stringify(envelope);
      const { seq, duplicate } = await this.#publish(subject, envelope.id, payload, head.seq);
      landedBefore ||= duplicate;
      stored.push({ ...envelope, seq } as unknown as StoredEvent<AggregateEvents[A]>);
      kept.push(decodeEvent({ seq, string: () => payload }));
      bytes += Buffer.byteLength(payload);
      head = { seq, hash: envelope.hash };
    }
    // An event id that landed before may have landed as another envelope (another time, another
    // correlation): what the log holds is then read from it.
    if (landedBefore) this.histories.forget(subject);
    else this.#extend(subject, input.head, kept, bytes);
    return { events: stored, head };
  }

  /**
   * Keeps an aggregate's history with what was appended at `at` (as a read of the log would
   * have it), where the history is known up to there.
   */
  #extend(subject: string, at: AggregateHead, appended: StoredEvent[], bytes: number): void {
    if (at.seq === 0) return this.histories.keep(subject, { events: appended, bytes });
    const kept = this.histories.get(subject);
    const top = kept?.events.at(-1);
    if (!kept || top?.seq !== at.seq || top.hash !== at.hash) return;
    this.histories.keep(subject, {
      events: [...kept.events, ...appended],
      bytes: kept.bytes + bytes,
    });
  }

  /**
   * Publishes one event. A publish whose answer is lost (a timeout, a cluster electing a new
   * leader) is sent again with the same msg id, so it lands at most once; the retries are
   * bounded and then the error is the caller's.
   */
  async #publish(
    subject: string,
    msgID: string,
    payload: string,
    expectedSeq: number,
  ): Promise<{ seq: number; duplicate: boolean }> {
    const publish = () =>
      this.js.publish(subject, payload, {
        msgID,
        expect: { lastSubjectSequence: expectedSeq },
        timeout: PUBLISH_TIMEOUT_MS,
      });
    try {
      const ack = await retry(publish, { attempts: PUBLISH_ATTEMPTS, retryable: isTransient });
      this.#saw(ack.seq);
      return { seq: ack.seq, duplicate: ack.duplicate };
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
  async last(aggregate: Aggregate, id: string): Promise<StoredEvent | null> {
    return (await this.#last(Subjects.event(aggregate, id)))?.event ?? null;
  }

  async #last(subject: string): Promise<Sized | null> {
    return this.#read(`read the last event of ${subject}`, { last_by_subj: subject });
  }

  /** One message of the event stream, or null when there is none (a direct request). */
  async #get(what: string, request: MsgRequest | NextMsgRequest): Promise<StoredEvent | null> {
    return (await this.#read(what, request))?.event ?? null;
  }

  async #read(what: string, request: MsgRequest | NextMsgRequest): Promise<Sized | null> {
    const msg = await getStoredMessage(this.jsm, Streams.events, request, what);
    if (!msg) return null;
    this.#saw(msg.seq);
    const event = decodeEvent({ seq: msg.seq, string: () => new TextDecoder().decode(msg.data) });
    return { event, bytes: msg.data.length };
  }

  /**
   * Reads every event of one aggregate, in order. It walks the subject with direct requests
   * (`next_by_subj`) instead of creating a consumer: an aggregate holds few events, and a
   * consumer's creation goes through the cluster's meta leader, which may place it on a server
   * that is down. What the process read or appended of the aggregate before is not read again:
   * the walk starts after it, where the log's chain goes on from it.
   */
  async load<A extends Aggregate>(aggregate: A, id: string): Promise<LoadedAggregate<A>> {
    const subject = Subjects.event(aggregate, id);
    const last = await this.#last(subject);
    if (!last) {
      this.histories.forget(subject);
      return { events: [], head: EMPTY_HEAD };
    }
    const head = { seq: last.event.seq, hash: last.event.hash };
    const kept = this.histories.get(subject);
    const top = kept?.events.at(-1);
    let history: History;
    if (kept && top?.seq === head.seq && top.hash === head.hash) history = kept;
    else {
      const newer = kept && top && top.seq < head.seq && (await this.#walk(subject, top.seq, last));
      history =
        newer && newer.events[0]!.prevHash === top.hash
          ? { events: [...kept.events, ...newer.events], bytes: kept.bytes + newer.bytes }
          : await this.#walk(subject, 0, last);
      this.histories.keep(subject, history);
    }
    return { events: [...history.events] as StoredEvent<AggregateEvents[A]>[], head };
  }

  /** The events of `subject` after sequence `after`, up to and with its last, `last`. */
  async #walk(subject: string, after: number, last: Sized): Promise<History> {
    const events: StoredEvent[] = [];
    let bytes = last.bytes;
    for (let seq = after + 1; seq < last.event.seq;) {
      const next = await this.#read(`read ${subject}`, { seq, next_by_subj: subject });
      if (!next || next.event.seq >= last.event.seq) break;
      events.push(next.event);
      bytes += next.bytes;
      seq = next.event.seq + 1;
    }
    events.push(last.event);
    return { events, bytes };
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
