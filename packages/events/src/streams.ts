import {
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  type JetStreamApiError,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import { retryTransient } from './retry.ts';
import { Streams, Subjects } from './subjects.ts';

/** JetStream's error code for a stream (or a KV bucket) that does not exist. */
export const STREAM_NOT_FOUND = 10059;

const NANOS_PER_MS = 1_000_000;
const ms = (n: number) => n * NANOS_PER_MS;
const DAY_MS = 24 * 3600 * 1000;

export interface StreamOptions {
  /** 1 for a single server, 3 for a cluster. */
  replicas: number;
  /** How long live logs stay in the stream (they are archived to the blob store at the end). */
  logMaxAgeMs: number;
  logMaxBytes: number;
  metricsMaxBytes: number;
}

export const DEFAULT_STREAM_OPTIONS: StreamOptions = {
  replicas: 1,
  logMaxAgeMs: 7 * DAY_MS,
  logMaxBytes: 4 * 1024 ** 3,
  metricsMaxBytes: 1024 ** 3,
};

/** The configuration of every Trainyard stream. */
export function streamConfigs(
  opts: StreamOptions = DEFAULT_STREAM_OPTIONS,
): (Partial<StreamConfig> & { name: string })[] {
  return [
    {
      name: Streams.events,
      subjects: [Subjects.allEvents],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      max_age: 0,
      deny_delete: true,
      deny_purge: true,
      allow_rollup_hdrs: false,
      duplicate_window: ms(2 * 60 * 1000),
      num_replicas: opts.replicas,
    },
    {
      name: Streams.heartbeats,
      subjects: [Subjects.allHeartbeats],
      storage: StorageType.Memory,
      retention: RetentionPolicy.Limits,
      max_msgs_per_subject: 1,
      max_age: ms(DAY_MS),
      num_replicas: opts.replicas,
    },
    {
      name: Streams.dispatch,
      subjects: [Subjects.allDispatch],
      storage: StorageType.File,
      retention: RetentionPolicy.Workqueue,
      duplicate_window: ms(2 * 60 * 1000),
      num_replicas: opts.replicas,
    },
    {
      name: Streams.logs,
      subjects: [Subjects.allLogs],
      // A worker reads the newest chunk of its own attempts by subject, which its login names.
      allow_direct: true,
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      max_age: ms(opts.logMaxAgeMs),
      max_bytes: opts.logMaxBytes,
      num_replicas: opts.replicas,
    },
    {
      // Training metrics wait here until the projector keeps them, as long as live logs stay.
      name: Streams.metrics,
      subjects: [Subjects.allMetrics],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      max_age: ms(opts.logMaxAgeMs),
      max_bytes: opts.metricsMaxBytes,
      num_replicas: opts.replicas,
    },
  ];
}

/** Creates the streams, or brings an existing one's settings up to date. Idempotent. */
export async function ensureStreams(
  jsm: JetStreamManager,
  opts: StreamOptions = DEFAULT_STREAM_OPTIONS,
): Promise<void> {
  for (const config of streamConfigs(opts)) {
    const name = config.name;
    const existing = await retryTransient(`read the stream ${name}`, () =>
      jsm.streams.info(name).catch((err: JetStreamApiError) => {
        if (err.code === STREAM_NOT_FOUND) return null;
        throw err;
      }),
    );
    if (!existing) {
      await retryTransient(`create the stream ${name}`, () => jsm.streams.add(config));
      continue;
    }
    const { name: _n, retention: _r, storage: _s, ...mutable } = config;
    await retryTransient(`update the stream ${name}`, () => jsm.streams.update(name, mutable));
  }
}
