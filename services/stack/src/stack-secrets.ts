/**
 * The secrets of the embedded stack, made on first start and kept under `home/secrets`: its
 * NATS logins (one per service, one for the local worker) and the key that signs its events.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { EventSigner } from '@trainyard/events';
import { servicePermissions, workerPermissions, type NatsUser } from '@trainyard/servers';
import { CONTROL_SERVICES, type ControlService } from '@trainyard/service-kit';
import { CliError, readSigningKey, signingKeyFile, writePrivate } from '@trainyard/cli';

/**
 * The logins of the embedded NATS, made on first start and kept in `home/secrets` (0600):
 * `control` (streams and buckets, and operators' commands), one per control-plane service, and
 * one for the local worker. Workers on other hosts have none here: each enrols for a key.
 */
export type NatsLogins = Record<'control' | ControlService | 'localWorker', string>;

export async function natsLogins(home: string): Promise<NatsLogins> {
  const dir = join(home, 'secrets');
  const file = join(dir, 'nats.json');
  const kept = await readFile(file, 'utf8')
    .then((t) => JSON.parse(t) as Partial<NatsLogins>)
    .catch(() => ({}) as Partial<NatsLogins>);
  const names = ['control', ...CONTROL_SERVICES, 'localWorker'] as const;
  if (names.every((n) => kept[n])) return kept as NatsLogins;
  const logins = Object.fromEntries(
    names.map((n) => [n, kept[n] ?? randomBytes(24).toString('base64url')]),
  ) as NatsLogins;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  await writeFile(file, JSON.stringify(logins, null, 2), { mode: 0o600 });
  return logins;
}

/**
 * The logins of the embedded NATS: each service's, and the local worker's (in the workers'
 * account), each allowed what it needs.
 */
export function natsUsers(
  logins: NatsLogins,
  localWorker: string | null,
): { users: NatsUser[]; workers: NatsUser[] } {
  return {
    users: [
      { user: 'control', password: logins.control },
      ...CONTROL_SERVICES.map((s) => ({
        user: s,
        password: logins[s],
        permissions: servicePermissions(s),
      })),
    ],
    workers: localWorker
      ? [
          {
            user: LOCAL_WORKER_USER,
            password: logins.localWorker,
            permissions: workerPermissions(localWorker),
          },
        ]
      : [],
  };
}

export const LOCAL_WORKER_USER = 'local-worker';

/**
 * The key that signs the events of `up`'s services: `TRAINYARD_SIGNING_KEY`, else one made on
 * first start and kept in `home/secrets/signing.json` (0600).
 */
export async function signingKey(home: string, fromEnv: string | undefined): Promise<EventSigner> {
  const kept = fromEnv ?? readSigningKey(home);
  if (kept) return EventSigner.fromPrivateKey(kept);
  const file = signingKeyFile(home);
  if (existsSync(file)) {
    throw new CliError(
      `${file} holds no signing key: restore it from a backup, or remove it to start signing with a new key (events signed with the old one then verify as signed by an unknown key)`,
      'BAD_SIGNING_KEY',
    );
  }
  const signer = EventSigner.generate();
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await chmod(dirname(file), 0o700);
  await writePrivate(
    file,
    JSON.stringify({ privateKey: signer.exportPrivateKey(), publicKey: signer.publicKey }, null, 2),
  );
  return signer;
}

/**
 * How `up`'s services trust the TLS of the nats-server it started: they reach it on loopback,
 * which the certificate, made for the name other hosts use, need not name.
 */
export const LOOPBACK_TLS = { rejectUnauthorized: false } as const;

export const withLogin = (url: string, user: string, password: string) =>
  url.replace('nats://', `nats://${user}:${password}@`);
