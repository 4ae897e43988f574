import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { nkeyAuthenticator, type NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import {
  ensureStreams,
  EventStore,
  DEFAULT_STREAM_OPTIONS,
  retryTransient,
  type EventSigner,
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

/**
 * The servers of a comma-separated NATS URL, and the login written into it
 * (`nats://user:password@host:port`), which the client takes as options, not in the URL.
 */
export function natsServers(url: string): { servers: string[]; user?: string; pass?: string } {
  let login: { user: string; pass: string } | undefined;
  const servers = url.split(',').map((raw) => {
    const u = raw.trim();
    const m = /^([a-z]+:\/\/)([^:@/]+):([^@/]*)@(.+)$/i.exec(u);
    if (!m) return u;
    login ??= { user: decodeURIComponent(m[2]!), pass: decodeURIComponent(m[3]!) };
    return `${m[1]}${m[4]}`;
  });
  return { servers, ...login };
}

/**
 * Connects to NATS, reconnecting forever, and makes sure the streams exist and are configured
 * as Trainyard wants; with `manage: false` (a worker, allowed no such thing) it leaves them as
 * the control plane made them. Events it appends are signed with `signer` when there is one.
 * A worker enrolled for a key of its own logs in with that key's seed.
 */
export async function connectBus(
  url: string,
  name: string,
  streams: Partial<StreamOptions> = {},
  manage = true,
  signer: EventSigner | null = null,
  nkeySeed: string | null = null,
): Promise<Bus> {
  const nc = await connect({
    ...natsServers(url),
    ...(nkeySeed && { authenticator: nkeyAuthenticator(new TextEncoder().encode(nkeySeed)) }),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 5_000,
    noAsyncTraces: true,
  });
  const jsm = await retryTransient('reach JetStream', () =>
    jetstreamManager(nc, { timeout: API_TIMEOUT_MS }),
  );
  if (manage) await ensureStreams(jsm, { ...DEFAULT_STREAM_OPTIONS, ...streams });
  const js = jetstream(nc, { timeout: API_TIMEOUT_MS });
  return {
    nc,
    js,
    jsm,
    store: new EventStore(js, jsm, signer),
    close: async () => {
      if (!nc.isClosed()) await nc.drain().catch(() => nc.close());
    },
  };
}
