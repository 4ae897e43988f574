import type {
  JetStreamApiError,
  JetStreamManager,
  MsgRequest,
  NextMsgRequest,
  StoredMsg,
} from '@nats-io/jetstream';
import { EventStoreError } from './errors.ts';

const NO_MESSAGE = 10037;

const ATTEMPTS = 10;
const TRANSIENT = new Set([
  'TimeoutError',
  'NoRespondersError',
  'RequestError',
  'JetStreamNotEnabled',
  'ClosedConnectionError',
]);

/**
 * Errors after which the same request may succeed: no answer, no responder, a cluster electing
 * a leader (JetStream answers 503, or 10008 "temporarily unavailable").
 */
export function isTransient(err: unknown): boolean {
  const e = err as { name?: string; code?: number; status?: number };
  return TRANSIENT.has(e.name ?? '') || e.status === 503 || e.code === 10008;
}

/** The pause before try number `attempt + 1`: 200 ms doubling up to 2 s (about 12 s in all). */
export function retryDelayMs(attempt: number): number {
  return Math.min(2_000, 100 * 2 ** attempt);
}

/**
 * Runs a JetStream request again after a transient error, a bounded number of times: at once
 * after a timeout (the wait is behind it), after a growing pause otherwise. When the error
 * outlasts the tries it becomes `EVENT_LOG_UNAVAILABLE`, naming `what` was attempted; any other
 * error is the caller's at once. Only for requests that are safe to repeat.
 */
export async function retryTransient<T>(what: string, request: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await request();
    } catch (err) {
      if (!isTransient(err)) throw err;
      if (attempt >= ATTEMPTS) {
        throw new EventStoreError('EVENT_LOG_UNAVAILABLE', `could not ${what}`, { cause: err });
      }
      if ((err as Error).name !== 'TimeoutError') {
        await new Promise((r) => setTimeout(r, retryDelayMs(attempt)));
      }
    }
  }
}

/**
 * One message of a stream by a direct request (`seq`, `last_by_subj`, or `next_by_subj`, which
 * 2.9 answers though the client types name it only for direct get), or null when there is none.
 * Transient errors are tried again.
 */
export function getStoredMessage(
  jsm: JetStreamManager,
  stream: string,
  request: MsgRequest | NextMsgRequest,
  what: string,
): Promise<StoredMsg | null> {
  return retryTransient(what, () =>
    jsm.streams.getMessage(stream, request as MsgRequest).catch((err: JetStreamApiError) => {
      if (err.code === NO_MESSAGE || err.status === 404) return null;
      throw err;
    }),
  );
}
