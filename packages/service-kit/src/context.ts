import { hostname } from 'node:os';
import { EventSigner } from '@trainyard/events';
import type { BlobStore, BlobReads } from '@trainyard/blobs';
import { openBlobStore } from './blob-store.ts';
import { BaseConfigSchema, parseEnv, type BaseConfig } from './config.ts';
import { createLogger, type Logger } from './logger.ts';
import { connectBus, type Bus, type NatsTlsOptions } from './nats.ts';
import { SharedLog } from './shared-log.ts';

/** What every service is started with. */
export interface ServiceContext {
  bus: Bus;
  blobs: BlobStore;
  log: Logger;
  config: BaseConfig;
  /** Names this process in events it appends (`actor`) and in NATS connection names. */
  instanceId: string;
  /** Follows the event log: one reader for every service of the process that shares it. */
  events: SharedLog;
}

/**
 * Connects to NATS and the blob store as the configuration says. A service that may not manage
 * streams (a worker) passes `manage: false`. Events are signed with `signer`, else with
 * `TRAINYARD_SIGNING_KEY` when it is set.
 */
export async function openContext(
  service: string,
  config: BaseConfig = parseEnv(BaseConfigSchema),
  opts: {
    manage?: boolean;
    signer?: EventSigner;
    nkeySeed?: string;
    tls?: NatsTlsOptions;
    inboxPrefix?: string;
    connectTimeoutMs?: number;
    /** How blobs are read: a worker, which may make no consumer, reads by direct gets. */
    blobReads?: BlobReads;
    /**
     * The object store buckets it may open, where NATS holds blobs, the first that is there
     * (default the shared one): a worker with a bucket of its own opens that, and reads the
     * shared one not at all.
     */
    blobBuckets?: string[];
    /** The reader of the event log this service shares with others in the process. */
    events?: SharedLog;
  } = {},
): Promise<ServiceContext> {
  const log = createLogger(service);
  const instanceId = `${service}@${hostname()}:${process.pid}`;
  const manage = opts.manage ?? true;
  const signer =
    opts.signer ??
    (config.TRAINYARD_SIGNING_KEY
      ? EventSigner.fromPrivateKey(config.TRAINYARD_SIGNING_KEY)
      : null);
  const tls: NatsTlsOptions | undefined =
    opts.tls ?? (config.TRAINYARD_NATS_CA ? { caFile: config.TRAINYARD_NATS_CA } : undefined);
  const bus = await connectBus(config.TRAINYARD_NATS_URL, instanceId, {
    streams: { replicas: config.TRAINYARD_STREAM_REPLICAS },
    manage,
    signer,
    nkeySeed: opts.nkeySeed ?? null,
    ...(tls && { tls }),
    ...(opts.inboxPrefix && { inboxPrefix: opts.inboxPrefix }),
    ...(opts.connectTimeoutMs && { connectTimeoutMs: opts.connectTimeoutMs }),
  });
  try {
    const blobs = await openBlobStore(config, bus.js, manage, opts.blobReads, opts.blobBuckets);
    return { bus, blobs, log, config, instanceId, events: opts.events ?? new SharedLog(bus.store) };
  } catch (err) {
    await bus.close();
    throw err;
  }
}
