import { retryPauseMs, sleep } from '@trainyard/events';
import type { Logger } from 'pino';

/** Something that runs until stopped. */
export interface Stoppable {
  stop(): Promise<void>;
}

/**
 * Stops `service` on SIGINT or SIGTERM, then exits. A second signal exits at once.
 * Returns a promise that settles when the process should end.
 */
export function stopOnSignals(service: Stoppable, log: Logger): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(130);
    }
    stopping = true;
    log.info({ signal }, 'stopping');
    service
      .stop()
      .then(() => process.exit(0))
      .catch((err: unknown) => {
        log.error({ err }, 'error while stopping');
        process.exit(1);
      });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
}

/**
 * Settles as `work` does, or fails with a timeout naming `what` once `ms` have passed, or at once
 * when `signal` aborts. Either way the work itself goes on: what it leaves must be safe to
 * abandon (a transaction that rolls back when its connection closes, say).
 */
export async function withDeadline<T>(
  what: string,
  ms: number,
  work: Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let unlisten = () => undefined as void;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    if (signal) unlisten = onAbort(signal, () => reject(new Error(`${what} was given up`)));
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
    unlisten();
  }
}

/**
 * Calls `fn` once `signal` aborts, at once if it already has (a listener added after the abort
 * would never run); returns what removes the listener.
 */
export function onAbort(signal: AbortSignal, fn: () => void): () => void {
  if (signal.aborted) {
    fn();
    return () => undefined;
  }
  signal.addEventListener('abort', fn, { once: true });
  return () => signal.removeEventListener('abort', fn);
}

export { sleep };

/**
 * Runs a loop until `signal` aborts, starting it again after an error, with a pause that grows
 * up to `maxPauseMs`. For consumers that must survive a broken connection or a bad moment.
 */
export async function supervise(
  name: string,
  loop: () => Promise<void>,
  signal: AbortSignal,
  log: Logger,
  maxPauseMs = 5_000,
): Promise<void> {
  let failures = 0;
  while (!signal.aborted) {
    try {
      await loop();
      failures = 0;
    } catch (err) {
      if (signal.aborted) return;
      log.error({ err, loop: name }, 'loop failed; restarting');
      await sleep(retryPauseMs(++failures, { baseMs: 100, maxMs: maxPauseMs }), signal);
    }
  }
}
