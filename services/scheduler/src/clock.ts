/**
 * Time as the planning rounds read it and wait on it, passed in so that a test can hold it still
 * and move it on by hand.
 */
export interface Clock {
  now(): Date;
  /** Calls `fn` once `ms` have passed; returns what cancels the call. */
  after(ms: number, fn: () => void): () => void;
}

/** The wall clock and the process's timers. */
export const realClock: Clock = {
  now: () => new Date(),
  after: (ms, fn) => {
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  },
};

/** Resolves once `ms` have passed on `clock`, or early when `signal` aborts. */
export function pause(clock: Clock, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const cancel = clock.after(ms, done);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      cancel();
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}
