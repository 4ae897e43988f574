import { hostname } from 'node:os';
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
 * streams (a worker) passes `manage: false`.
 */
export async function openContext(
  service: string,
  config: BaseConfig = parseEnv(BaseConfigSchema),
  opts: { manage?: boolean } = {},
): Promise<ServiceContext> {
  const log = createLogger(service);
  const instanceId = `${service}@${hostname()}:${process.pid}`;
  const manage = opts.manage ?? true;
  const bus = await connectBus(
    config.TRAINYARD_NATS_URL,
    instanceId,
    { replicas: config.TRAINYARD_STREAM_REPLICAS },
    manage,
  );
  const blobs = await openBlobStore(config, bus.js, manage);
  return { bus, blobs, log, config, instanceId };
}
