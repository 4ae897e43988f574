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
  type StreamOptions,
} from '@trainyard/events';

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
  const jsm = await jetstreamManager(nc);
  await ensureStreams(jsm, { ...DEFAULT_STREAM_OPTIONS, ...streams });
  const js = jetstream(nc);
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
