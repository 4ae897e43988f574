import {
  BaseConfigSchema,
  createLogger,
  openContext,
  parseEnv,
  type ServiceContext,
} from '@trainyard/service-kit';

/** A service context against a test NATS, logging only warnings and errors. */
export async function testContext(natsUrl: string, name = 'test'): Promise<ServiceContext> {
  process.env.TRAINYARD_LOG_LEVEL ??= 'warn';
  const config = parseEnv(BaseConfigSchema, { TRAINYARD_NATS_URL: natsUrl });
  const ctx = await openContext(name, config);
  return { ...ctx, log: createLogger(name) };
}
