import type { JetStreamClient } from '@nats-io/jetstream';
import type { BaseConfig } from './config.ts';
import { ConfigError } from './config.ts';
import { JetStreamBlobStore, type BlobReads, S3BlobStore } from '@trainyard/blobs';
import type { BlobStore } from '@trainyard/blobs';

/** Opens the blob store the configuration names. */
export async function openBlobStore(
  config: BaseConfig,
  js: JetStreamClient,
  manage = true,
  reads: BlobReads = 'consumer',
  /** The object store buckets, where NATS holds blobs, the first that is there: a worker's own. */
  buckets = ['trainyard'],
): Promise<BlobStore> {
  if (config.TRAINYARD_BLOB_STORE === 'nats') {
    return JetStreamBlobStore.open(js, buckets, config.TRAINYARD_STREAM_REPLICAS, manage, reads);
  }
  const { TRAINYARD_S3_ENDPOINT: endpoint, TRAINYARD_S3_ACCESS_KEY: accessKey } = config;
  const secretKey = config.TRAINYARD_S3_SECRET_KEY;
  if (!endpoint || !accessKey || !secretKey) {
    throw new ConfigError(
      'TRAINYARD_BLOB_STORE=s3 needs TRAINYARD_S3_ENDPOINT, TRAINYARD_S3_ACCESS_KEY and TRAINYARD_S3_SECRET_KEY',
    );
  }
  return S3BlobStore.open({
    endpoint,
    accessKey,
    secretKey,
    bucket: config.TRAINYARD_S3_BUCKET,
    region: config.TRAINYARD_S3_REGION,
  });
}
