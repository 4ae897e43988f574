import type { JetStreamClient } from '@nats-io/jetstream';
import { openLeaseBucket, openLivenessBucket, openPositionBucket } from '@trainyard/service-kit';
import { WorkerKeys } from './worker-keys.ts';

/**
 * Makes the buckets of the services other than the API, with the login that makes streams, so
 * that those services need not make any stream themselves: a login that may make a stream may
 * make one that copies a secret bucket (`sources`), so theirs may not.
 */
export async function ensureServiceBuckets(
  js: JetStreamClient,
  replicas: number,
  ttls: { leaseTtlMs: number; livenessTtlMs: number },
): Promise<void> {
  await openLeaseBucket(js, ttls.leaseTtlMs, replicas);
  await openLivenessBucket(js, ttls.livenessTtlMs, replicas);
  await openPositionBucket(js, replicas);
  await WorkerKeys.open(js, replicas);
}
