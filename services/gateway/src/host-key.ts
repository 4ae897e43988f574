import { createHash } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import ssh2 from 'ssh2';
import { retry } from '@trainyard/events';
import { GATEWAY_BUCKET, HOST_KEY, type StoredHostKey } from '@trainyard/application';
import { openBucket } from '@trainyard/service-kit';

/** `SHA256:…` of an OpenSSH public key line, as `ssh-keygen -l` prints it. */
export function fingerprintOf(publicKey: string): string {
  const blob = Buffer.from(publicKey.trim().split(/\s+/)[1] ?? '', 'base64');
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/**
 * The gateway's host key: made once, by the first gateway to start, and kept in KV so that every
 * gateway (and every restart) shows clients the same key, which they pin.
 */
export async function loadHostKey(js: JetStreamClient, replicas = 1): Promise<StoredHostKey> {
  const kv = await openBucket(js, GATEWAY_BUCKET, { history: 1, replicas });
  const made = ssh2.utils.generateKeyPairSync('ed25519');
  const candidate: StoredHostKey = {
    privateKey: made.private,
    publicKey: made.public.trim(),
    fingerprint: fingerprintOf(made.public),
  };
  return retry(
    async (attempt) => {
      await kv.create(HOST_KEY, JSON.stringify(candidate)).catch(() => undefined);
      const entry = await kv.get(HOST_KEY).catch(() => null);
      if (entry?.operation === 'PUT') return entry.json<StoredHostKey>();
      throw new Error(`could not settle the gateway host key after ${attempt} tries`);
    },
    { attempts: 20, baseMs: 250 },
  );
}
