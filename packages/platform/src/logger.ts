import { pino, type Logger } from 'pino';

export type { Logger };

/** Paths that may hold secrets; pino replaces their values before anything is written. */
export const REDACT_PATHS = [
  'password',
  '*.password',
  'token',
  '*.token',
  'authorization',
  '*.authorization',
  'req.headers.authorization',
  'env',
  '*.env',
  'spec.env',
  '*.spec.env',
  'secretKey',
  '*.secretKey',
];

/** The shared logger: JSON lines, secrets redacted, level from `TRAINYARD_LOG_LEVEL`. */
export function createLogger(
  name: string,
  level = process.env.TRAINYARD_LOG_LEVEL ?? 'info',
): Logger {
  return pino({ name, level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } });
}
