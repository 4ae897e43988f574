import { createHash, randomBytes } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import type { JetStreamApiError } from '@nats-io/jetstream';
import {
  GATEWAY_PUBLIC_BUCKET,
  HOST_KEY,
  SSH_PASSWORDS_BUCKET,
  type PublicHostKey,
  type StoredSshPassword,
} from '@trainyard/application';
import { retryTransient, STREAM_NOT_FOUND } from '@trainyard/events';
import { openBucket } from '@trainyard/service-kit';

/**
 * What the API hands out for reaching a session through the SSH gateway: one-time passwords
 * (their hashes kept where the gateway reads them, a bucket of the two alone) and the gateway's
 * public host key, which a client pins so that its first connection cannot be intercepted (the
 * private half is in a bucket the API may not read).
 */
export class GatewayAccess {
  private constructor(
    private readonly passwords: KV,
    private readonly gateway: KV,
    readonly passwordTtlMs: number,
  ) {}

  /**
   * Opens (or makes) the buckets. Passwords outlive their expiry in the bucket by a minute at
   * most: `expiresAt` is what counts, the bucket's age limit only keeps it from growing.
   */
  static async open(
    js: JetStreamClient,
    opts: { replicas?: number; passwordTtlMs: number },
  ): Promise<GatewayAccess> {
    const replicas = opts.replicas ?? 1;
    const [passwords, gateway] = await Promise.all([
      openBucket(js, SSH_PASSWORDS_BUCKET, {
        history: 1,
        replicas,
        ttl: opts.passwordTtlMs + 60_000,
      }),
      // Made by the gateway, never here: whoever makes a bucket sets what flows into it.
      new Kvm(js).open(GATEWAY_PUBLIC_BUCKET),
    ]);
    return new GatewayAccess(passwords, gateway, opts.passwordTtlMs);
  }

  /** The gateway's public host key line and its fingerprint; null before one first started. */
  async hostKey(): Promise<{ publicKey: string; fingerprint: string } | null> {
    const entry = await retryTransient('read the gateway host key', () =>
      this.gateway.get(HOST_KEY).catch((err: JetStreamApiError) => {
        if (err.code === STREAM_NOT_FOUND) return null;
        throw err;
      }),
    );
    if (!entry || entry.operation !== 'PUT') return null;
    try {
      const { publicKey, fingerprint } = entry.json<PublicHostKey>();
      return typeof publicKey === 'string' && typeof fingerprint === 'string'
        ? { publicKey: publicKey.trim(), fingerprint }
        : null;
    } catch {
      return null;
    }
  }

  /**
   * A new one-time password for a session's run, replacing any the session had: 24 random
   * bytes, base64url. Only its hash is kept.
   */
  async issuePassword(
    sessionId: string,
    run: { runId: string; owner: string },
    now = Date.now(),
  ): Promise<{ password: string; expiresAt: string }> {
    const password = randomBytes(24).toString('base64url');
    const expiresAt = new Date(now + this.passwordTtlMs).toISOString();
    const stored: StoredSshPassword = {
      sha256: createHash('sha256').update(password).digest('hex'),
      expiresAt,
      runId: run.runId,
      owner: run.owner,
    };
    await retryTransient('keep the one-time password', () =>
      this.passwords.put(sessionId, JSON.stringify(stored)),
    );
    return { password, expiresAt };
  }
}
