import type { JetStreamClient } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';

/**
 * A lease in a KV bucket whose entries expire after `ttlMs`: whoever creates the key holds it
 * and must renew it within the TTL. Used for leader election.
 */
export class KvLease {
  #revision = 0;
  private constructor(
    private readonly kv: KV,
    readonly key: string,
    readonly holder: string,
  ) {}

  static async open(js: JetStreamClient, key: string, holder: string, ttlMs: number, replicas = 1) {
    const kv = await new Kvm(js).create('ty_leases', { ttl: ttlMs, history: 1, replicas });
    return new KvLease(kv, key, holder);
  }

  get held(): boolean {
    return this.#revision > 0;
  }

  /** Takes the lease if nobody holds it; renews it if we do. Returns whether we hold it. */
  async tryAcquire(): Promise<boolean> {
    try {
      this.#revision = this.held
        ? await this.kv.update(this.key, this.holder, this.#revision)
        : await this.kv.create(this.key, this.holder);
    } catch {
      this.#revision = 0;
    }
    return this.held;
  }

  async release(): Promise<void> {
    if (!this.held) return;
    await this.kv.delete(this.key, { previousSeq: this.#revision }).catch(() => undefined);
    this.#revision = 0;
  }
}
