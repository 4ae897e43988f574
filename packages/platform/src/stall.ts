/** What a reader of the log tells the stall watch. */
export interface StallWatch {
  /** Call on every message read. */
  touch(seq: number): void;
  dispose(): void;
}

/**
 * Stops a reader that has stalled: the log has moved past what it read, yet nothing arrived for
 * `stallMs`. It happens when the server that held an ordered consumer dies and the consumer is
 * not re-created; the reader's loop then starts a fresh consumer from its own saved position.
 */
export function watchForStall(opts: {
  /** The sequence the reader starts after: it has seen everything up to here. */
  readUpTo: number;
  stallMs: number;
  lastSeq: () => Promise<number>;
  stop: () => void;
  onStall?: (read: number, last: number) => void;
}): StallWatch {
  let read = opts.readUpTo;
  let activeAt = Date.now();
  let checking = false;
  const timer = setInterval(
    () => {
      if (checking || Date.now() - activeAt < opts.stallMs) return;
      checking = true;
      opts
        .lastSeq()
        .then((last) => {
          if (last > read && Date.now() - activeAt >= opts.stallMs) {
            opts.onStall?.(read, last);
            opts.stop();
          }
        })
        .catch(() => undefined)
        .finally(() => (checking = false));
    },
    Math.max(100, opts.stallMs / 4),
  );
  return {
    touch: (seq) => {
      read = Math.max(read, seq);
      activeAt = Date.now();
    },
    dispose: () => clearInterval(timer),
  };
}
