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

/** How a call is tried again: how often, how long, with which pauses, until what. */
export interface RetryPolicy {
  /** Tries in all, the first included (default 10); `Infinity` with a signal or a deadline. */
  attempts?: number;
  /** No try starts later than this many milliseconds after the first. */
  deadlineMs?: number;
  /** The first pause (default 200 ms); each one after doubles, up to `maxMs` (default 2 s). */
  baseMs?: number;
  maxMs?: number;
  /**
   * Each pause is drawn between half and all of its length (default), so that callers who
   * failed together do not all try again together.
   */
  jitter?: boolean;
  /** Whether an error is worth another try (default: every error is). */
  retryable?: (err: unknown) => boolean;
  /** Whether the wait was already spent on an error, such as a timeout: tried again at once. */
  waited?: (err: unknown) => boolean;
  /** Ends the retrying (the first try always runs): a pause ends at once, and the last error is thrown. */
  signal?: AbortSignal;
  /** Told of each error that is tried again, before the pause. */
  onRetry?: (err: unknown, attempt: number, pauseMs: number) => void;
}

/**
 * The pause before try `attempt + 1`: `baseMs` doubling up to `maxMs`, drawn between half and
 * all of that when `jitter`.
 */
export function retryPauseMs(
  attempt: number,
  policy: Pick<RetryPolicy, 'baseMs' | 'maxMs' | 'jitter'> = {},
  random: () => number = Math.random,
): number {
  const { baseMs = 200, maxMs = 2_000, jitter = true } = policy;
  const full = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return jitter ? Math.round(full / 2 + (random() * full) / 2) : full;
}

/** Resolves after `ms`, or early when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * Calls `call` until it succeeds, as the policy says: the one way Trainyard tries anything
 * again. The error that ends it (not retryable, out of tries, past the deadline, aborted) is
 * thrown as it was.
 */
export async function retry<T>(
  call: (attempt: number) => Promise<T>,
  policy: RetryPolicy = {},
): Promise<T> {
  const { attempts = 10, deadlineMs, signal, retryable, waited, onRetry } = policy;
  const deadline = deadlineMs === undefined ? Infinity : Date.now() + deadlineMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call(attempt);
    } catch (err) {
      if (retryable && !retryable(err)) throw err;
      if (attempt >= attempts || signal?.aborted) throw err;
      const pause = waited?.(err) ? 0 : retryPauseMs(attempt, policy);
      if (Date.now() + pause > deadline) throw err;
      onRetry?.(err, attempt, pause);
      await sleep(pause, signal);
      if (signal?.aborted) throw err;
    }
  }
}

/**
 * Runs a JetStream request again after a transient error, a bounded number of times: at once
 * after a timeout (the wait is behind it), after a growing pause otherwise. When the error
 * outlasts the tries it becomes `EVENT_LOG_UNAVAILABLE`, naming `what` was attempted; any other
 * error is the caller's at once. Only for requests that are safe to repeat.
 */
export async function retryTransient<T>(what: string, request: () => Promise<T>): Promise<T> {
  try {
    return await retry(request, {
      attempts: ATTEMPTS,
      retryable: isTransient,
      waited: (err) => (err as Error).name === 'TimeoutError',
    });
  } catch (err) {
    if (!isTransient(err)) throw err;
    throw new EventStoreError('EVENT_LOG_UNAVAILABLE', `could not ${what}`, { cause: err });
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
