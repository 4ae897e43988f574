import type { EventStore, StoredEvent } from '@trainyard/events';
import { decodeEvent } from '@trainyard/events';
import type { Consumer, JsMsg } from '@nats-io/jetstream';
import { onAbort } from './lifecycle.ts';
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
  /**
   * Called whenever the reader has read everything the log held: at the start when nothing waits
   * for it (through its filter); after an event the server reported nothing waiting behind; or,
   * when one that reported more is followed by nothing for `quietMs`, once the log confirms it.
   * A reader whose count proves wrong (a server's count can stay off after a failover) returns
   * after the call, and the caller starts it again.
   */
  onCaughtUp?: () => void;
  /** Called when the reader's count proved wrong and it is about to return. */
  onMiscount?: (lastRead: number) => void;
  quietMs?: number;
}

/** How long a reader waits for events it was told wait, before it asks the log itself. */
export const QUIET_MS = 200;

/**
 * Reads the log in order from `fromSeq` and hands each event to `onEvent`, and calls
 * `onCaughtUp` whenever it has read all there was. Returns when `signal` aborts, or when the
 * reader stalled: events wait after the last one read, yet none arrived for `stallMs` (the
 * server that held the reader died and it was not re-created); or when its count of waiting
 * events proved wrong. The caller then starts it again from its own position. The next event is
 * read only after `onEvent` settles.
 */
export async function followLog(
  store: EventStore,
  opts: FollowOptions,
  onEvent: (event: StoredEvent) => void | Promise<void>,
): Promise<void> {
  if (opts.signal.aborted) return;
  const messages = await store.reader({
    fromSeq: opts.fromSeq,
    ...(opts.filter && { filter: opts.filter }),
    ...(opts.maxMessages && { maxMessages: opts.maxMessages }),
  });
  const stop = () => messages.stop();
  const forgetAbort = onAbort(opts.signal, stop);
  let lastRead = opts.fromSeq - 1;
  let handling = false;
  const isBehind = async (seq: number) =>
    opts.filter ? store.hasAfter(seq, opts.filter) : (await store.lastSeq()) > seq;
  const stall = watchForStall({
    stallMs: opts.stallMs ?? STALL_MS,
    isBehind: async () => !handling && (await isBehind(lastRead)),
    stop,
    onStall: () => opts.onStall?.(lastRead),
  });
  let toldMore = false;
  let confirming = false;
  let ended = false;
  const confirm = () => {
    if (!toldMore || handling || confirming) return;
    confirming = true;
    const at = lastRead;
    isBehind(at)
      .then((behind) => {
        if (ended || behind || lastRead !== at) return;
        opts.onCaughtUp?.();
        opts.onMiscount?.(at);
        stop();
      })
      .catch(() => undefined)
      .finally(() => (confirming = false));
  };
  let quiet: NodeJS.Timeout | undefined;
  // A reader with nothing to read (at the end of the log, or nothing there through its filter)
  // gets no message, and so no count to go by: the log itself says so.
  if (opts.onCaughtUp) {
    const start = lastRead;
    isBehind(start)
      .then((behind) => {
        if (!behind && !ended && lastRead === start && !opts.signal.aborted) opts.onCaughtUp?.();
      })
      .catch(() => undefined);
  }
  const caughtUp = (pending: number) => {
    toldMore = pending > 0;
    if (!opts.onCaughtUp) return;
    if (!toldMore) opts.onCaughtUp();
    else if (quiet) quiet.refresh();
    else quiet = setTimeout(confirm, opts.quietMs ?? QUIET_MS);
  };
  try {
    for await (const msg of messages as AsyncIterable<JsMsg>) {
      stall.touch();
      lastRead = msg.seq;
      const handled = onEvent(decodeEvent(msg));
      if (handled) {
        handling = true;
        await handled;
        handling = false;
        stall.touch();
      }
      caughtUp(msg.info.pending);
    }
  } finally {
    ended = true;
    clearTimeout(quiet);
    stall.dispose();
    forgetAbort();
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
  const forgetAbort = onAbort(signal, stop);
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
    forgetAbort();
    messages.stop();
  }
}
