import type { Msg } from '@nats-io/nats-core';
import { workerInbox, type Logger, type ServiceContext } from '@trainyard/service-kit';

/** A worker id as a report or fetch subject may carry it. */
export const WORKER_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * A report (or a fetch) is a request a client sent: from the workers' account its reply is one the server
 * maps back to the asker (`_R_.`); within the control plane's account (a login with every
 * right, or a server without accounts) it is the worker's own inbox, or any inbox. A message
 * JetStream delivered to `ty.report.<worker>` (a push consumer or a republish aimed there by
 * someone who may publish into a stream) carries no such reply subject, and is not taken for the
 * worker's word.
 */
export function askedByAClient(msg: Msg, workerId: string): boolean {
  const reply = msg.reply ?? '';
  return (
    reply.startsWith(`${workerInbox(workerId)}.`) ||
    reply.startsWith('_INBOX.') ||
    reply.startsWith('_R_.')
  );
}

export interface WorkerRequestLimits {
  /** Requests answered at once, of all workers; more wait in the subscription. */
  concurrency: number;
  /** Requests of one worker answered at once, so that one worker cannot take every answer. */
  perWorker: number;
  /** Requests of one worker that wait their turn; past them, `busy` answers. */
  waiting: number;
  /** A request that waited longer than its sender waits for an answer is dropped: it was sent again. */
  staleMs: number;
}

/**
 * Serves the requests workers send on `<prefix>.<worker>` (reports, fetches): each taken only
 * when it is a client's request on its own worker's subject, answered a bounded number at once,
 * per worker and in all, a worker's extra requests waiting their turn in order.
 */
export function serveWorkerRequests(
  ctx: ServiceContext,
  opts: {
    /** The subjects, `<prefix>.*`. */
    subject: string;
    queue: string;
    limits: WorkerRequestLimits;
    log: Logger;
    handle(msg: Msg, workerId: string): Promise<void>;
    /** Answers a request of a worker whose waiting requests are too many already. */
    busy(msg: Msg, workerId: string): void;
  },
): { stop(): Promise<void> } {
  const { limits, log } = opts;
  const prefix = opts.subject.slice(0, -1);
  const running = new Set<Promise<void>>();
  const inFlight = new Map<string, number>();
  const waiting = new Map<string, { msg: Msg; at: number }[]>();

  /** The next request of `workerId` still worth answering. */
  function nextWaiting(workerId: string): Msg | undefined {
    const queue = waiting.get(workerId);
    let next: { msg: Msg; at: number } | undefined;
    while ((next = queue?.shift()) && Date.now() - next.at > limits.staleMs);
    if (queue?.length === 0) waiting.delete(workerId);
    return next?.msg;
  }

  /** Answers `msg`; when done, the next waiting request of the same worker takes its place. */
  function start(workerId: string, msg: Msg): void {
    inFlight.set(workerId, (inFlight.get(workerId) ?? 0) + 1);
    const done: Promise<void> = opts
      .handle(msg, workerId)
      .catch((err: unknown) => log.error({ err, workerId }, 'could not answer a request'))
      .finally(() => {
        running.delete(done);
        const next = nextWaiting(workerId);
        const left = (inFlight.get(workerId) ?? 1) - 1;
        if (left > 0) inFlight.set(workerId, left);
        else inFlight.delete(workerId);
        if (next) start(workerId, next);
      });
    running.add(done);
  }

  const sub = ctx.bus.nc.subscribe(opts.subject, { queue: opts.queue });
  const loop = (async () => {
    for await (const msg of sub) {
      const workerId = msg.subject.slice(prefix.length);
      // Checked before anything is queued or answered: no answer goes to a reply that is not
      // the worker's own inbox.
      if (!WORKER_ID.test(workerId) || !askedByAClient(msg, workerId)) {
        log.warn(
          { workerId: workerId.slice(0, 64), reply: msg.reply?.slice(0, 128) ?? null },
          'dropped a message that is no request of a client (delivered by JetStream?)',
        );
        continue;
      }
      if ((inFlight.get(workerId) ?? 0) >= limits.perWorker) {
        const queue = waiting.get(workerId) ?? [];
        if (queue.length >= limits.waiting) opts.busy(msg, workerId);
        else {
          queue.push({ msg, at: Date.now() });
          waiting.set(workerId, queue);
        }
        continue;
      }
      while (running.size >= limits.concurrency) await Promise.race(running);
      start(workerId, msg);
    }
  })();

  return {
    stop: async () => {
      await sub.drain();
      await loop;
      while (running.size > 0) await Promise.all(running);
    },
  };
}
