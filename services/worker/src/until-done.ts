import { retry } from '@trainyard/events';
import type { Logger } from '@trainyard/service-kit';

/**
 * Runs `step` until it succeeds: while NATS or the blob store is away, what the step keeps
 * (outputs, a log, a report) waits on disk. Gives up only when `signal` aborts (the worker
 * stops); false then.
 */
export async function untilDone(
  log: Pick<Logger, 'warn' | 'error'>,
  jobId: string,
  what: string,
  step: () => Promise<void>,
  signal: AbortSignal,
): Promise<boolean> {
  try {
    await retry(step, {
      attempts: Infinity,
      baseMs: 500,
      maxMs: 30_000,
      signal,
      onRetry: (err, _, wait) => log.warn({ err, jobId, wait }, `could not ${what}; trying again`),
    });
    return true;
  } catch (err) {
    log.error({ err, jobId }, `could not ${what} before the worker stopped`);
    return false;
  }
}
