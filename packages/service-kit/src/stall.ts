/** What a reader tells the stall watch. */
export interface StallWatch {
  /** Call on every message read. */
  touch(): void;
  dispose(): void;
}

/**
 * Stops a reader that has stalled: work is waiting for it (`isBehind`), yet nothing arrived for
 * `stallMs`. It happens when the server that held a consumer dies and the consumer or its pull is
 * not re-created; the reader's loop then starts afresh from its own saved position. A reader
 * that got nothing for `stallMs` and cannot even ask whether work waits is started again too.
 */
export function watchForStall(opts: {
  stallMs: number;
  isBehind: () => Promise<boolean>;
  stop: () => void;
  onStall?: () => void;
}): StallWatch {
  let activeAt = Date.now();
  let checking = false;
  const idle = () => Date.now() - activeAt >= opts.stallMs;
  const timer = setInterval(
    () => {
      if (checking || !idle()) return;
      checking = true;
      const stall = () => {
        if (!idle()) return;
        opts.onStall?.();
        opts.stop();
      };
      opts
        .isBehind()
        .then((behind) => behind && stall())
        .catch(stall)
        .finally(() => (checking = false));
    },
    Math.max(100, opts.stallMs / 4),
  );
  return {
    touch: () => (activeAt = Date.now()),
    dispose: () => clearInterval(timer),
  };
}
