import { workerBucket, type BlobReads } from '@trainyard/blobs';
import {
  BaseConfigSchema,
  connectBus,
  parseEnv,
  openContext,
  CONTROL_SERVICES,
  serviceInbox,
  workerInbox,
  type BaseConfig,
  type Bus,
  type NatsTlsOptions,
  type ServiceContext,
} from '@trainyard/service-kit';
import { connectDb, migrate } from '@trainyard/projections';
import { readSigningKey, readStack, CliError } from '@trainyard/cli';
import { reach } from './connect.ts';
import { workerCredential } from './enrol.ts';

const HOW_TO_POINT =
  'run it where `npm run up` runs (or set TRAINYARD_HOME to that stack’s state directory), or set TRAINYARD_NATS_URL and DATABASE_URL';

/**
 * The configuration for a service started on its own: the environment, falling back to the
 * embedded stack that `trainyard up` runs (found through `TRAINYARD_HOME`, `./.trainyard`, or
 * the latest one this user started), whose signing key it then signs its events with.
 */
export function serviceConfig(env = process.env): BaseConfig {
  const stack = readStack(env);
  return parseEnv(BaseConfigSchema, {
    ...env,
    ...(!env.TRAINYARD_NATS_URL && stack && { TRAINYARD_NATS_URL: stack.natsUrl }),
    ...(!env.DATABASE_URL && stack && { DATABASE_URL: stack.databaseUrl }),
    ...(!env.TRAINYARD_SIGNING_KEY &&
      stack && { TRAINYARD_SIGNING_KEY: readSigningKey(stack.home) }),
    ...(!env.TRAINYARD_DOCKER_HOST &&
      stack?.dockerHost && { TRAINYARD_DOCKER_HOST: stack.dockerHost }),
    ...(!env.TRAINYARD_REGISTRY && stack?.registry && { TRAINYARD_REGISTRY: stack.registry }),
  });
}

/**
 * The public keys an operator's `events verify` trusts: the embedded stack's (from its
 * `stack.json`) and those listed in `TRAINYARD_TRUSTED_KEYS`.
 */
export function trustedKeys(config: BaseConfig, env = process.env): string[] {
  const listed = (config.TRAINYARD_TRUSTED_KEYS ?? '')
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  const own = readStack(env)?.publicKey;
  return [...new Set([...(own ? [own] : []), ...listed])];
}

/**
 * How a command trusts the local stack's NATS when that requires TLS: it reaches it on
 * loopback, which the certificate need not name. Elsewhere `TRAINYARD_NATS_CA` says whom to trust.
 */
function localTls(env = process.env): { tls: NatsTlsOptions } | Record<string, never> {
  if (env.TRAINYARD_NATS_URL || !readStack(env)?.natsTls) return {};
  return { tls: { rejectUnauthorized: false } };
}

/** A service's connections; a worker's, which may not manage streams, leaves them be. */
export async function serviceContext(
  name: string,
  opts: { inboxPrefix?: string; blobReads?: BlobReads; blobBuckets?: string[] } = {},
): Promise<ServiceContext> {
  const config = serviceConfig();
  const service = CONTROL_SERVICES.find((s) => s === name);
  return reach('NATS', config.TRAINYARD_NATS_URL, 'TRAINYARD_NATS_URL', () =>
    openContext(name, config, {
      manage: name !== 'worker' && config.TRAINYARD_MANAGE_STREAMS === 'true',
      ...(service && { inboxPrefix: serviceInbox(service) }),
      ...localTls(),
      ...opts,
    }),
  );
}

/** How long a freshly enrolled worker waits for NATS to take its new key. */
const NEW_KEY_WAIT_MS = 15_000;

/**
 * A worker's connections: with its own key when it enrolled (`--token`, or a key it kept),
 * else as any service (a URL's login, or the local stack's). `enrolled` says which: an enrolled
 * worker writes to the bucket of its own that the control plane made when it enrolled; another
 * writes to its own bucket when one was made for it, else to the shared one.
 */
export async function workerContext(
  name: string,
  opts: { token?: string; key?: string; api?: string },
  env = process.env,
): Promise<{ ctx: ServiceContext; enrolled: boolean }> {
  const enrolled = await workerCredential(name, opts, env);
  const inboxPrefix = workerInbox(name);
  if (!enrolled) {
    if (opts.api && !env.TRAINYARD_NATS_URL) {
      throw new CliError(
        `worker ${name} has no key yet: enrol it with a one-time token, --token TOKEN (an admin makes one with \`trainyard worker token create ${name}\`)`,
        'NOT_ENROLLED',
      );
    }
    return {
      ctx: await serviceContext('worker', {
        inboxPrefix,
        blobReads: 'direct',
        blobBuckets: [workerBucket(name), 'trainyard'],
      }),
      enrolled: false,
    };
  }
  const { credential, fresh } = enrolled;
  const url = env.TRAINYARD_NATS_URL ?? credential.natsUrl;
  const config = parseEnv(BaseConfigSchema, { ...env, TRAINYARD_NATS_URL: url });
  // A server that knew no key when the worker dialled may not answer it at all until it has
  // reloaded with the new key: a fresh key is tried in short attempts.
  const open = () =>
    openContext('worker', config, {
      manage: false,
      nkeySeed: credential.seed,
      inboxPrefix,
      blobReads: 'direct',
      blobBuckets: [workerBucket(name)],
      ...(fresh && { connectTimeoutMs: 2_000 }),
    });
  const deadline = Date.now() + (fresh ? NEW_KEY_WAIT_MS : 0);
  for (;;) {
    try {
      return { ctx: await open(), enrolled: true };
    } catch (err) {
      const refused = /authorization/i.test(String((err as Error).message));
      const timedOut = (err as Error).name === 'TimeoutError';
      if ((refused || timedOut) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        continue;
      }
      if (refused) {
        throw new CliError(
          `NATS at ${url} refused the key of worker ${name}: it was revoked, or this is not the server it enrolled with. Enrol again with a new token (--token)`,
          'WORKER_KEY_REFUSED',
          1,
          { cause: err },
        );
      }
      return reach('NATS', url, 'TRAINYARD_NATS_URL', () => Promise.reject(err));
    }
  }
}

/**
 * The configuration for an operator's command (`events verify`, `projections rebuild`): it must
 * find a stack, and says how to point it at one when it cannot.
 */
export function operatorConfig(env = process.env): BaseConfig {
  if (!env.TRAINYARD_NATS_URL && !readStack(env)) {
    throw new CliError(`no running Trainyard found: ${HOW_TO_POINT}`, 'NO_STACK');
  }
  return serviceConfig(env);
}

/** The event log's connection for an operator's command. */
export function operatorBus(config: BaseConfig): Promise<Bus> {
  return reach('NATS', config.TRAINYARD_NATS_URL, 'TRAINYARD_NATS_URL', () =>
    connectBus(config.TRAINYARD_NATS_URL, 'trainyard-cli', {
      ...(config.TRAINYARD_NATS_CA && { tls: { caFile: config.TRAINYARD_NATS_CA } }),
      ...localTls(),
    }),
  );
}

/** The read database, migrated; the commands that need one fail clearly without it. */
export async function database(config: BaseConfig) {
  const url = config.DATABASE_URL;
  if (!url)
    throw new CliError(
      `DATABASE_URL is not set and no running Trainyard was found: ${HOW_TO_POINT}`,
      'NO_DATABASE',
    );
  const db = connectDb(url);
  try {
    await reach('PostgreSQL', url, 'DATABASE_URL', () => migrate(db));
  } catch (err) {
    await db.destroy();
    throw err;
  }
  return db;
}
