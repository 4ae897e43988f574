import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { openBucket } from './buckets.ts';

/** The bucket where instances announce themselves; an announcement expires after `ttlMs`. */
export const openLivenessBucket = (js: JetStreamClient, ttlMs: number, replicas = 1) =>
  openBucket(js, 'ty_alive', { ttl: ttlMs, history: 1, replicas });

/** Instance ids hold `@` and `:`, which KV keys may not: base64url keeps them apart and valid. */
const keyOf = (instanceId: string) => Buffer.from(instanceId).toString('base64url');

/**
 * Which service instances are alive: each announces itself in a KV bucket whose entries expire
 * after `ttlMs`, and renews the announcement well within it. An instance that died is gone from
 * the bucket once its last announcement expires.
 */
export class Liveness {
  private constructor(private readonly kv: KV) {}

  static async open(js: JetStreamClient, ttlMs: number, replicas = 1): Promise<Liveness> {
    return new Liveness(await openLivenessBucket(js, ttlMs, replicas));
  }

  async announce(instanceId: string): Promise<void> {
    await this.kv.put(keyOf(instanceId), new Date().toISOString());
  }

  async isAlive(instanceId: string): Promise<boolean> {
    const entry = await this.kv.get(keyOf(instanceId));
    return entry !== null && entry.operation === 'PUT';
  }

  async withdraw(instanceId: string): Promise<void> {
    await this.kv.delete(keyOf(instanceId)).catch(() => undefined);
  }
}
