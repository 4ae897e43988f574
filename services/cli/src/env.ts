import {
  BaseConfigSchema,
  openContext,
  parseEnv,
  type BaseConfig,
  type ServiceContext,
} from '@trainyard/platform';
import { connectDb, migrate } from '@trainyard/projections';
import { CliError } from './client.ts';
import { readStack } from './config.ts';

/**
 * The configuration for a service started on its own: the environment, falling back to the
 * embedded stack that `trainyard up` runs from this directory.
 */
export function serviceConfig(env = process.env): BaseConfig {
  const stack = readStack(env);
  return parseEnv(BaseConfigSchema, {
    ...env,
    ...(!env.TRAINYARD_NATS_URL && stack && { TRAINYARD_NATS_URL: stack.natsUrl }),
    ...(!env.DATABASE_URL && stack && { DATABASE_URL: stack.databaseUrl }),
  });
}

export async function serviceContext(name: string): Promise<ServiceContext> {
  return openContext(name, serviceConfig());
}

/** The read database, migrated; the commands that need one fail clearly without it. */
export async function database(config: BaseConfig) {
  if (!config.DATABASE_URL)
    throw new CliError('DATABASE_URL is not set (and no local `trainyard up` is running)');
  const db = connectDb(config.DATABASE_URL);
  await migrate(db);
  return db;
}
