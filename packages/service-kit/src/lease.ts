import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { isTransient } from '@trainyard/events';
import { openBucket } from './buckets.ts';

/** The bucket of leases, made on first use: its entries expire after `ttlMs`. */
export const openLeaseBucket = (js: JetStreamClient, ttlMs: number, replicas = 1) =>
  openBucket(js, 'ty_leases', { ttl: ttlMs, history: 1, replicas });

/** The share of the TTL after the last renewal during which the holder still counts as holding. */
const HOLD_SHARE = 0.8;

/**
 * A lease in a KV bucket whose entries expire after `ttlMs`: whoever creates the key holds it
 * and must renew it within the TTL. Used for leader election.
 *
 * A renewal that gets no answer (a cluster electing a leader) does not end the lease at once:
 * the entry outlives the request that last wrote it by the TTL, so nobody else can take it
 * before then, and the holder keeps it for most of that time while it tries again.
 */
export class KvLease {
  #revision = 0;
  #renewedAt = 0;
  #renewalFailing = false;
  private constructor(
    private readonly kv: KV,
    readonly key: string,
    readonly holder: string,
    readonly ttlMs: number,
  ) {}

  static async open(js: JetStreamClient, key: string, holder: string, ttlMs: number, replicas = 1) {
    const kv = await openLeaseBucket(js, ttlMs, replicas);
    return new KvLease(kv, key, holder, ttlMs);
  }

  get held(): boolean {
    if (this.#revision === 0) return false;
    return !this.#renewalFailing || Date.now() < this.#renewedAt + this.ttlMs * HOLD_SHARE;
  }

  /** Takes the lease if nobody holds it; renews it if we do. Returns whether we hold it. */
  async tryAcquire(): Promise<boolean> {
    const sentAt = Date.now();
    try {
      this.#revision =
        this.#revision > 0
          ? await this.kv.update(this.key, this.holder, this.#revision)
          : await this.kv.create(this.key, this.holder);
      this.#renewedAt = sentAt;
      this.#renewalFailing = false;
    } catch (err) {
      this.#renewalFailing = true;
      if (!isTransient(err) || !this.held) this.#revision = 0;
    }
    return this.held;
  }

  async release(): Promise<void> {
    this.#renewalFailing = false;
    if (this.#revision === 0) return;
    await this.kv.delete(this.key, { previousSeq: this.#revision }).catch(() => undefined);
    this.#revision = 0;
  }
}
