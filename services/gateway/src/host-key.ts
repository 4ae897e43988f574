import { createHash } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import ssh2 from 'ssh2';
import { retry } from '@trainyard/events';
import {
  GATEWAY_BUCKET,
  GATEWAY_PUBLIC_BUCKET,
  HOST_KEY,
  type PublicHostKey,
  type StoredHostKey,
} from '@trainyard/application';
import { openBucket } from '@trainyard/service-kit';

/** `SHA256:…` of an OpenSSH public key line, as `ssh-keygen -l` prints it. */
export function fingerprintOf(publicKey: string): string {
  const blob = Buffer.from(publicKey.trim().split(/\s+/)[1] ?? '', 'base64');
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** Whether ssh2 can use a stored key: its private half and its public line both parse. */
export function usableHostKey(key: Partial<StoredHostKey>): key is StoredHostKey {
  if (typeof key.privateKey !== 'string' || typeof key.publicKey !== 'string') return false;
  return (
    !(ssh2.utils.parseKey(key.privateKey) instanceof Error) &&
    !(ssh2.utils.parseKey(key.publicKey) instanceof Error)
  );
}

/**
 * A new ed25519 host key. ssh2's generator makes one it cannot parse back about once in 256
 * (it strips a public key's leading zero byte: mscdex/ssh2#1513), so each is checked, and one
 * that does not parse is made again.
 */
export function newHostKey(generate = () => ssh2.utils.generateKeyPairSync('ed25519')) {
  for (let i = 0; i < 16; i++) {
    const made = generate();
    const key = {
      privateKey: made.private,
      publicKey: made.public.trim(),
      fingerprint: fingerprintOf(made.public),
    };
    if (usableHostKey(key)) return key;
  }
  throw new Error('could not make an SSH host key that parses');
}

/**
 * The gateway's host key: made once, by the first gateway to start, and kept in KV so that every
 * gateway (and every restart) shows clients the same key, which they pin. A stored key that
 * ssh2 cannot use (one made before keys were checked) is replaced. Its public half is shown in
 * a bucket of its own, the one the API reads: the private half stays where only gateways read.
 */
export async function loadHostKey(js: JetStreamClient, replicas = 1): Promise<StoredHostKey> {
  const key = await settleHostKey(js, replicas);
  const shown = await openBucket(js, GATEWAY_PUBLIC_BUCKET, { history: 1, replicas });
  const { publicKey, fingerprint } = key;
  const half: PublicHostKey = { publicKey, fingerprint };
  await retry(() => shown.put(HOST_KEY, JSON.stringify(half)), { attempts: 10, baseMs: 250 });
  return key;
}

async function settleHostKey(js: JetStreamClient, replicas: number): Promise<StoredHostKey> {
  const kv = await openBucket(js, GATEWAY_BUCKET, { history: 1, replicas });
  const candidate: StoredHostKey = newHostKey();
  return retry(
    async (attempt) => {
      await kv.create(HOST_KEY, JSON.stringify(candidate)).catch(() => undefined);
      const entry = await kv.get(HOST_KEY).catch(() => null);
      if (entry?.operation === 'PUT') {
        let stored: Partial<StoredHostKey> = {};
        try {
          stored = entry.json<Partial<StoredHostKey>>();
        } catch {
          // Not JSON: replaced below.
        }
        if (usableHostKey(stored)) return stored;
        await kv.update(HOST_KEY, JSON.stringify(candidate), entry.revision).catch(() => 0);
      }
      throw new Error(`could not settle the gateway host key after ${attempt} tries`);
    },
    { attempts: 20, baseMs: 250 },
  );
}
