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

/** A NATS URL with any login taken out of it (user and password, or a token), for others to see. */
export function natsUrlWithoutLogin(url: string): string {
  return url
    .split(',')
    .map((raw) => {
      const u = raw.trim();
      const at = u.lastIndexOf('@');
      const scheme = u.indexOf('://');
      return at > scheme && scheme >= 0 ? u.slice(0, scheme + 3) + u.slice(at + 1) : u;
    })
    .join(',');
}

/**
 * Connects to NATS, reconnecting forever, and makes sure the streams exist and are configured
 * as Trainyard wants; with `manage: false` (a worker, allowed no such thing) it leaves them as
 * the control plane made them. Events it appends are signed with `signer` when there is one.
 * A worker enrolled for a key of its own logs in with that key's seed.
 */
export interface BusOptions {
  streams?: Partial<StreamOptions>;
  /** False for a worker, which may not manage streams. Default true. */
  manage?: boolean;
  signer?: EventSigner | null;
  /** An enrolled worker's nkey seed, to log in with. */
  nkeySeed?: string | null;
  /** TLS options for a server that requires TLS (a CA file to trust, for one). */
  tls?: NatsTlsOptions;
  /** Where replies to this connection arrive (a worker's own, see `workerInbox`). */
  inboxPrefix?: string;
  /** How long the first connection may take (nats.js's default: 20 s). */
  connectTimeoutMs?: number;
}

/** What a NATS connection trusts: `caFile` (PEM), or, for a loopback server of our own only, any certificate. */
export type NatsTlsOptions = { caFile: string } | { rejectUnauthorized: false };

/** A connection to NATS as the URL's login (or `nkeySeed`), reconnecting for as long as it runs. */
export function connectNats(
  url: string,
  name: string,
  opts: Pick<BusOptions, 'nkeySeed' | 'tls' | 'inboxPrefix' | 'connectTimeoutMs'> = {},
): Promise<NatsConnection> {
  return connect({
    ...natsServers(url),
    ...(opts.nkeySeed && {
      authenticator: nkeyAuthenticator(new TextEncoder().encode(opts.nkeySeed)),
    }),
    ...(opts.tls && { tls: opts.tls }),
    ...(opts.inboxPrefix && { inboxPrefix: opts.inboxPrefix }),
    ...(opts.connectTimeoutMs && { timeout: opts.connectTimeoutMs }),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 5_000,
    noAsyncTraces: true,
  });
}

export async function connectBus(url: string, name: string, opts: BusOptions = {}): Promise<Bus> {
  const manage = opts.manage ?? true;
  const nc = await connectNats(url, name, opts);
  const jsm = await retryTransient('reach JetStream', () =>
    jetstreamManager(nc, { timeout: API_TIMEOUT_MS }),
  );
  if (manage) await ensureStreams(jsm, { ...DEFAULT_STREAM_OPTIONS, ...opts.streams });
  const js = jetstream(nc, { timeout: API_TIMEOUT_MS });
  return {
    nc,
    js,
    jsm,
    store: new EventStore(js, jsm, opts.signer ?? null),
    close: async () => {
      if (!nc.isClosed()) await nc.drain().catch(() => nc.close());
    },
  };
}
