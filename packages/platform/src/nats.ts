import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import {
  ensureStreams,
  EventStore,
  DEFAULT_STREAM_OPTIONS,
  retryTransient,
  type StreamOptions,
} from '@trainyard/events';

/**
 * How long a JetStream API request (a consumer's creation, a direct read, a KV write) waits for
 * its answer. Shorter than the client's 5 s: on a 2.9 cluster with a server down about one
 * consumer creation in three is never answered, and callers try again after a timeout.
 */
const API_TIMEOUT_MS = 2_500;

/** One NATS connection and the JetStream handles built on it. */
export interface Bus {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  store: EventStore;
  close(): Promise<void>;
}

/** Connects to NATS, reconnecting forever, and makes sure the streams exist. */
export async function connectBus(
  url: string,
  name: string,
  streams: Partial<StreamOptions> = {},
): Promise<Bus> {
  const nc = await connect({
    servers: url.split(','),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 5_000,
    noAsyncTraces: true,
  });
  const jsm = await retryTransient('reach JetStream', () =>
    jetstreamManager(nc, { timeout: API_TIMEOUT_MS }),
  );
  await ensureStreams(jsm, { ...DEFAULT_STREAM_OPTIONS, ...streams });
  const js = jetstream(nc, { timeout: API_TIMEOUT_MS });
  return {
    nc,
    js,
    jsm,
    store: new EventStore(js, jsm),
    close: async () => {
      if (!nc.isClosed()) await nc.drain().catch(() => nc.close());
    },
  };
}
