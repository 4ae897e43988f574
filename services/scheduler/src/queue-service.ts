import type { Msg, Subscription } from '@nats-io/nats-core';
import {
  explainQueue,
  type ClusterState,
  type PlacementPolicy,
  type QueueView,
} from '@trainyard/domain';
import { QueueRequestSchema, Subjects, type QueueReply } from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';

/** A view is worked out again once the state has moved on, or this long after. */
const FRESH_MS = 1_000;

export interface QueueService {
  stop(): Promise<void>;
}

/**
 * Answers the API's questions about the queue (`Subjects.queue`) from the leader's folded state:
 * the queue in placement order with why each entry waits, and who holds what. One view serves
 * every question until the state moves on or a second passes.
 */
export function serveQueue(
  ctx: ServiceContext,
  state: () => ClusterState,
  policy: PlacementPolicy,
): QueueService {
  let cached: { seq: number; atMs: number; view: QueueView } | null = null;
  const view = (): { seq: number; atMs: number; view: QueueView } => {
    const cluster = state();
    const now = Date.now();
    if (!cached || cached.seq !== cluster.lastSeq || now - cached.atMs > FRESH_MS)
      cached = {
        seq: cluster.lastSeq,
        atMs: now,
        view: explainQueue(cluster, new Date(now), policy),
      };
    return cached;
  };
  const answer = (msg: Msg): void => {
    const request = QueueRequestSchema.safeParse(safeJson(msg));
    if (!request.success) {
      msg.respond(JSON.stringify({ error: 'not a queue request' }));
      return;
    }
    const { seq, atMs, view: queue } = view();
    const q = request.data;
    const entries =
      q.op === 'explain'
        ? queue.entries.filter((e) => e.id === q.id)
        : (q.owner === undefined
            ? queue.entries
            : queue.entries.filter((e) => e.owner === q.owner)
          ).slice(0, q.limit);
    const reply: QueueReply = {
      seq,
      at: new Date(atMs).toISOString(),
      total: queue.entries.length,
      entries,
      ...(q.op === 'list' && q.owner === undefined && { holders: queue.holders }),
    };
    msg.respond(JSON.stringify(reply));
  };
  const sub: Subscription = ctx.bus.nc.subscribe(Subjects.queue, {
    queue: 'scheduler',
    callback: (err, msg) => {
      if (err) return ctx.log.warn({ err }, 'queue requests stopped');
      try {
        answer(msg);
      } catch (e) {
        ctx.log.warn({ err: e }, 'could not answer a queue request');
      }
    },
  });
  return {
    stop: async () => {
      if (!sub.isClosed()) await sub.drain().catch(() => sub.unsubscribe());
    },
  };
}

function safeJson(msg: Msg): unknown {
  try {
    return msg.json();
  } catch {
    return null;
  }
}
