import type { Msg, Subscription } from '@nats-io/nats-core';
import {
  describePending,
  explainQueue,
  holderOf,
  teamHoldingOf,
  type ClusterState,
  type PlacementPolicy,
  type QueueView,
} from '@trainyard/domain';
import {
  QueueRequestSchema,
  Subjects,
  type QueueReply,
  type QueueRequest,
} from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';

/** A view is worked out again once the log has moved on, or it is this old (priorities age)... */
const FRESH_MS = 1_000;
/** ...but serves for this many times what working it out took: questions cost the leader little. */
const COST_FACTOR = 10;

export interface QueueService {
  stop(): void;
}

interface View {
  seq: number;
  /** When it was worked out, on the wall clock (for the answer) and the monotonic one. */
  atMs: number;
  madeMs: number;
  /** Until when it serves, whatever happens, on the monotonic clock. */
  untilMs: number;
  queue: QueueView;
}

/**
 * Answers the API's questions about the queue (`Subjects.queue`) from the leader's folded state:
 * the queue in placement order with why each entry waits, and who holds what. A view is worked
 * out again when the log has moved on (or a second has passed), but serves at least ten times
 * as long as it took to work out: however many questions come, answering them takes at most a
 * tenth of the leader's time, and on a small cluster the answer is as fresh as the state.
 */
export function serveQueue(
  ctx: ServiceContext,
  state: () => ClusterState,
  policy: PlacementPolicy,
): QueueService {
  let view: View | null = null;
  const current = (): View => {
    const nowMs = performance.now();
    const cluster = state();
    const fresh =
      view &&
      (nowMs < view.untilMs || (view.seq === cluster.lastSeq && nowMs - view.madeMs < FRESH_MS));
    if (view && fresh) return view;
    const atMs = Date.now();
    const queue = explainQueue(cluster, new Date(atMs), policy);
    const tookMs = performance.now() - nowMs;
    view = {
      seq: cluster.lastSeq,
      atMs,
      madeMs: nowMs,
      untilMs: nowMs + tookMs * COST_FACTOR,
      queue,
    };
    return view;
  };
  const answer = (msg: Msg): void => {
    const request = QueueRequestSchema.safeParse(safeJson(msg));
    if (!request.success) {
      msg.respond(JSON.stringify({ error: 'not a queue request' }));
      return;
    }
    const { seq, atMs, queue } = current();
    const q = request.data;
    const { entries, ...holding } =
      q.op === 'explain'
        ? { entries: queue.entries.filter((e) => e.id === q.id) }
        : listing(queue, q);
    const reply: QueueReply = {
      seq,
      at: new Date(atMs).toISOString(),
      total: queue.entries.length,
      positioned: queue.positioned,
      entries: (q.op === 'list' ? entries.slice(0, q.limit) : entries).map(describePending),
      ...holding,
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
    stop: () => {
      try {
        sub.unsubscribe();
      } catch (err) {
        ctx.log.debug({ err }, 'queue requests already stopped');
      }
    },
  };
}

/** What a `list` asks for: one owner's entries and holding, one team's, or everyone's. */
function listing(queue: QueueView, q: Extract<QueueRequest, { op: 'list' }>) {
  if (q.owner !== undefined) {
    return {
      entries: queue.entries.filter((e) => e.owner === q.owner),
      holders: [holderOf(queue, q.owner)],
    };
  }
  if (q.team !== undefined) {
    return {
      entries: queue.entries.filter((e) => e.team === q.team),
      teams: [teamHoldingOf(queue, q.team)],
    };
  }
  return { entries: queue.entries, holders: queue.holders, teams: queue.teams };
}

function safeJson(msg: Msg): unknown {
  try {
    return msg.json();
  } catch {
    return null;
  }
}
