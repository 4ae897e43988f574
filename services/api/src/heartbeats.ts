import { DeliverPolicy } from '@nats-io/jetstream';
import { HeartbeatSchema, retryTransient, Streams, Subjects } from '@trainyard/events';
import { onAbort, supervise, type Bus, type Logger } from '@trainyard/service-kit';

/** One GPU's use, as a worker's heartbeat reads it. */
export interface GpuUse {
  index: number;
  usedBytes: number;
  utilPct: number;
}

/** A worker's last heartbeat: when it was stored, and its GPUs' use then. */
export interface LastBeat {
  at: string;
  gpus: GpuUse[];
}

/** What a heartbeat says of the GPUs; nothing, for one that does not read as a heartbeat. */
export function gpuUseOf(body: Uint8Array): GpuUse[] {
  try {
    const beat = HeartbeatSchema.safeParse(JSON.parse(new TextDecoder().decode(body)));
    return beat.success ? beat.data.gpus : [];
  } catch {
    return [];
  }
}

/** When each worker was last heard from, and its GPUs' use then, kept as the heartbeats arrive. */
export interface HeartbeatView {
  /** True once it holds every worker's last heartbeat that the stream held when it started. */
  readonly ready: boolean;
  /** The worker's last heartbeat, or null when it has sent none. */
  last(workerId: string): LastBeat | null;
  stop(): Promise<void>;
}

/**
 * Follows the heartbeat stream from each worker's last beat on, so that listing the workers
 * reads no heartbeat at all: one reader per API process instead of one read per worker per
 * request. A broken reader starts again from each worker's last beat.
 */
export function watchHeartbeats(bus: Bus, log: Logger): HeartbeatView {
  const seen = new Map<string, { atMs: number; gpus: GpuUse[] }>();
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
    // A stop asked for while the reader was being made ends it at once.
    const unlisten = onAbort(stopping.signal, () => messages.stop());
    try {
      for await (const msg of messages) {
        const workerId = msg.subject.slice('ty.hb.'.length);
        const atMs = msg.info.timestampNanos / 1e6;
        if (atMs >= (seen.get(workerId)?.atMs ?? 0)) {
          seen.set(workerId, { atMs, gpus: gpuUseOf(msg.data) });
        }
        if (msg.info.pending === 0) ready = true;
      }
    } finally {
      unlisten();
    }
    if (!stopping.signal.aborted) throw new Error('the heartbeat reader ended');
  };
  const loop = supervise('api-heartbeats', follow, stopping.signal, log);
  return {
    get ready() {
      return ready;
    },
    last: (workerId) => {
      const beat = seen.get(workerId);
      return beat ? { at: new Date(beat.atMs).toISOString(), gpus: beat.gpus } : null;
    },
    stop: async () => {
      stopping.abort();
      await loop;
    },
  };
}
