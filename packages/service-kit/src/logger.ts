import { pino, type DestinationStream, type Logger } from 'pino';

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
  'privateKey',
  '*.privateKey',
  'TRAINYARD_SIGNING_KEY',
  '*.TRAINYARD_SIGNING_KEY',
];

/** Where loggers made from now on write: stdout, as JSON lines, unless a program says else. */
let destination: DestinationStream | undefined;

/**
 * Sends every logger made after this call to `dest`: `trainyard up` on a terminal passes a
 * pretty printer, so that a person reads lines rather than JSON.
 */
export function setLogDestination(dest: DestinationStream): void {
  destination = dest;
}

/** The shared logger: JSON lines, secrets redacted, level from `TRAINYARD_LOG_LEVEL`. */
export function createLogger(
  name: string,
  level = process.env.TRAINYARD_LOG_LEVEL ?? 'info',
): Logger {
  const options = { name, level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
}
