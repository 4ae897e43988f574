import { DeliverPolicy } from '@nats-io/jetstream';
import { retryTransient, Streams, Subjects } from '@trainyard/events';
import { supervise, type Bus, type Logger } from '@trainyard/service-kit';

/** When each worker was last heard from, kept as the heartbeats arrive. */
export interface HeartbeatView {
  /** True once it holds every worker's last heartbeat that the stream held when it started. */
  readonly ready: boolean;
  /** The time of the worker's last heartbeat, or null when it has sent none. */
  lastSeen(workerId: string): string | null;
  stop(): Promise<void>;
}

/**
 * Follows the heartbeat stream from each worker's last beat on, so that listing the workers
 * reads no heartbeat at all: one reader per API process instead of one read per worker per
 * request. A broken reader starts again from each worker's last beat.
 */
export function watchHeartbeats(bus: Bus, log: Logger): HeartbeatView {
  const seen = new Map<string, number>();
  const stopping = new AbortController();
  let ready = false;
  const follow = async () => {
    const consumer = await retryTransient('read the heartbeats', () =>
      bus.js.consumers.get(Streams.heartbeats, {
        filter_subjects: Subjects.allHeartbeats,
        deliver_policy: DeliverPolicy.LastPerSubject,
      }),
    );
    const stream = await retryTransient('read the heartbeat stream', () =>
      bus.jsm.streams.info(Streams.heartbeats),
    );
    if (stream.state.messages === 0) ready = true;
    const messages = await consumer.consume({ max_messages: 256 });
    const stop = () => messages.stop();
    stopping.signal.addEventListener('abort', stop, { once: true });
    try {
      for await (const msg of messages) {
        const workerId = msg.subject.slice('ty.hb.'.length);
        const at = msg.info.timestampNanos / 1e6;
        seen.set(workerId, Math.max(seen.get(workerId) ?? 0, at));
        if (msg.info.pending === 0) ready = true;
      }
    } finally {
      stopping.signal.removeEventListener('abort', stop);
    }
    if (!stopping.signal.aborted) throw new Error('the heartbeat reader ended');
  };
  const loop = supervise('api-heartbeats', follow, stopping.signal, log);
  return {
    get ready() {
      return ready;
    },
    lastSeen: (workerId) => {
      const at = seen.get(workerId);
      return at === undefined ? null : new Date(at).toISOString();
    },
    stop: async () => {
      stopping.abort();
      await loop;
    },
  };
}
