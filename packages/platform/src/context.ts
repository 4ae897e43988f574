import { hostname } from 'node:os';
import { EventSigner } from '@trainyard/events';
import type { BlobStore } from './blob/types.ts';
import { openBlobStore } from './blob/open.ts';
import { BaseConfigSchema, parseEnv, type BaseConfig } from './config.ts';
import { createLogger, type Logger } from './logger.ts';
import { connectBus, type Bus } from './nats.ts';

/** What every service is started with. */
export interface ServiceContext {
  bus: Bus;
  blobs: BlobStore;
  log: Logger;
  config: BaseConfig;
  /** Names this process in events it appends (`actor`) and in NATS connection names. */
  instanceId: string;
}

/**
 * Connects to NATS and the blob store as the configuration says. A service that may not manage
 * streams (a worker) passes `manage: false`. Events are signed with `signer`, else with
 * `TRAINYARD_SIGNING_KEY` when it is set.
 */
export async function openContext(
  service: string,
  config: BaseConfig = parseEnv(BaseConfigSchema),
  opts: { manage?: boolean; signer?: EventSigner; nkeySeed?: string } = {},
): Promise<ServiceContext> {
  const log = createLogger(service);
  const instanceId = `${service}@${hostname()}:${process.pid}`;
  const manage = opts.manage ?? true;
  const signer =
    opts.signer ??
    (config.TRAINYARD_SIGNING_KEY
      ? EventSigner.fromPrivateKey(config.TRAINYARD_SIGNING_KEY)
      : null);
  const bus = await connectBus(
    config.TRAINYARD_NATS_URL,
    instanceId,
    { replicas: config.TRAINYARD_STREAM_REPLICAS },
    manage,
    signer,
    opts.nkeySeed ?? null,
  );
  const blobs = await openBlobStore(config, bus.js, manage);
  return { bus, blobs, log, config, instanceId };
}
