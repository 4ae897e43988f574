import type { JetStreamClient } from '@nats-io/jetstream';
import { Kvm, type KV, type KvOptions } from '@nats-io/kv';
import { retryTransient } from '@trainyard/events';

/**
 * Opens a KV bucket, creating it on first use; tried again while the cluster does not answer,
 * so a service that starts during a failover waits for it instead of exiting.
 */
export function openBucket(
  js: JetStreamClient,
  name: string,
  opts: Partial<KvOptions>,
): Promise<KV> {
  return retryTransient(`open the KV bucket ${name}`, () => new Kvm(js).create(name, opts));
}
