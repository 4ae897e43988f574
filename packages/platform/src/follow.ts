import type { EventStore, StoredEvent } from '@trainyard/events';
import { decodeEvent } from '@trainyard/events';
import type { Consumer, JsMsg } from '@nats-io/jetstream';
import { watchForStall } from './stall.ts';

/** A reader that got nothing for this long while the log moved on is started again. */
export const STALL_MS = 10_000;

export interface FollowOptions {
  fromSeq: number;
  /** A subject filter; default every event. */
  filter?: string;
  maxMessages?: number;
  signal: AbortSignal;
  stallMs?: number;
  /** Called when the reader stalled and is about to return. */
  onStall?: (lastRead: number) => void;
}

/**
 * Reads the log in order from `fromSeq` and hands each event to `onEvent` with how many more
 * were waiting when it arrived (0: caught up). Returns when `signal` aborts, or when the reader
 * stalled: events wait after the last one read, yet none arrived for `stallMs` (the server that
 * held the reader died and it was not re-created). The caller then starts it again from its own
 * position. The next event is read only after `onEvent` settles.
 */
export async function followLog(
  store: EventStore,
  opts: FollowOptions,
  onEvent: (event: StoredEvent, pending: number) => void | Promise<void>,
): Promise<void> {
  if (opts.signal.aborted) return;
  const messages = await store.reader({
    fromSeq: opts.fromSeq,
    ...(opts.filter && { filter: opts.filter }),
    ...(opts.maxMessages && { maxMessages: opts.maxMessages }),
  });
  const stop = () => messages.stop();
  opts.signal.addEventListener('abort', stop, { once: true });
  let lastRead = opts.fromSeq - 1;
  let handling = false;
  const stall = watchForStall({
    stallMs: opts.stallMs ?? STALL_MS,
    isBehind: async () => {
      if (handling) return false;
      if (opts.filter) return store.hasAfter(lastRead, opts.filter);
      return (await store.lastSeq()) > lastRead;
    },
    stop,
    onStall: () => opts.onStall?.(lastRead),
  });
  try {
    for await (const msg of messages as AsyncIterable<JsMsg>) {
      stall.touch();
      lastRead = msg.seq;
      const handled = onEvent(decodeEvent(msg), msg.info.pending);
      if (handled) {
        handling = true;
        await handled;
        handling = false;
        stall.touch();
      }
    }
  } finally {
    stall.dispose();
    opts.signal.removeEventListener('abort', stop);
    messages.stop();
  }
}

/**
 * Takes messages from a durable consumer, handing each to `handle` (which acks), until `signal`
 * aborts. If messages wait on the consumer but none arrived for `stallMs` (its server died and
 * the pull was not renewed), it returns, and the caller starts it again.
 */
export async function takeFromDurable(
  consumer: Consumer,
  handle: (msg: JsMsg) => void,
  signal: AbortSignal,
  opts: { maxMessages?: number; stallMs?: number } = {},
): Promise<void> {
  if (signal.aborted) return;
  const messages = await consumer.consume({ max_messages: opts.maxMessages ?? 64 });
  const stop = () => messages.stop();
  signal.addEventListener('abort', stop, { once: true });
  const stall = watchForStall({
    stallMs: opts.stallMs ?? STALL_MS,
    isBehind: async () => (await consumer.info()).num_pending > 0,
    stop,
  });
  try {
    for await (const msg of messages) {
      stall.touch();
      handle(msg);
    }
  } finally {
    stall.dispose();
    signal.removeEventListener('abort', stop);
    messages.stop();
  }
}
