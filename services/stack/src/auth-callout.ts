import { WorkerKeys } from '@trainyard/application';
import { ensureWorkerBucket } from '@trainyard/blobs';
import { authIssuer, startAuthCallout } from '@trainyard/servers';
import { connectNats, createLogger, stopOnSignals } from '@trainyard/service-kit';
import { CliError } from '@trainyard/cli';
import { reach } from './connect.ts';
import { serviceContext } from './env.ts';

/** A setting `nats auth` cannot run without. */
function required(env: NodeJS.ProcessEnv, name: string, what: string): string {
  const value = env[name];
  if (!value) throw new CliError(`${name} is not set: ${what}`, 'MISSING_SETTING');
  return value;
}

/**
 * `trainyard nats auth`: the auth callout of a nats-server whose logins are fixed in its config
 * (`infra/nats/accounts.conf`). It reads the enrolled keys with `TRAINYARD_NATS_URL`'s login (the
 * control login: with NATS holding blobs, it also makes each worker's bucket), answers the
 * server as the auth login (`TRAINYARD_AUTH_NATS_URL`), and closes a revoked worker's connections
 * as the system login (`TRAINYARD_SYS_NATS_URL`).
 */
export async function runAuthCallout(env: NodeJS.ProcessEnv): Promise<void> {
  const authUrl = required(
    env,
    'TRAINYARD_AUTH_NATS_URL',
    'the auth login of accounts.conf, e.g. nats://auth:PASSWORD@nats-1:4222',
  );
  const systemUrl = required(
    env,
    'TRAINYARD_SYS_NATS_URL',
    'the sys login of accounts.conf, e.g. nats://sys:PASSWORD@nats-1:4222',
  );
  const issuerSeed = required(
    env,
    'TRAINYARD_AUTH_ISSUER_SEED',
    'the seed `trainyard nats issuer` printed, whose public half nats-server has as TRAINYARD_AUTH_ISSUER',
  );
  try {
    authIssuer(issuerSeed);
  } catch {
    throw new CliError(
      'TRAINYARD_AUTH_ISSUER_SEED is no account nkey seed (SA…): make a pair with `trainyard nats issuer`',
      'BAD_SETTING',
    );
  }
  const log = createLogger('nats-auth');
  const ctx = await serviceContext('nats-auth');
  const ca = ctx.config.TRAINYARD_NATS_CA;
  const tls = ca ? { tls: { caFile: ca } } : {};
  const auth = await reach('NATS', authUrl, 'TRAINYARD_AUTH_NATS_URL', () =>
    connectNats(authUrl, 'nats-auth', tls),
  );
  const system = await reach('NATS', systemUrl, 'TRAINYARD_SYS_NATS_URL', () =>
    connectNats(systemUrl, 'nats-auth-system', tls),
  );
  const replicas = ctx.config.TRAINYARD_STREAM_REPLICAS;
  const callout = startAuthCallout({
    auth,
    system,
    issuerSeed,
    keys: await WorkerKeys.open(ctx.bus.js, replicas),
    log,
    ...(ctx.config.TRAINYARD_BLOB_STORE === 'nats' && {
      prepare: (worker: string) => ensureWorkerBucket(ctx.bus.js, worker, replicas),
    }),
  });
  log.info('answering nats-server about workers’ logins');
  stopOnSignals(
    {
      stop: async () => {
        await callout.stop();
        await Promise.all([auth.drain(), system.drain(), ctx.bus.close()]);
      },
    },
    log,
  );
}
