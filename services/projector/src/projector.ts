import type { Kysely } from 'kysely';
import { retry, type RetryPolicy, type StoredEvent } from '@trainyard/events';
import { supervise, withDeadline, type ServiceContext } from '@trainyard/service-kit';
import { applyBatch, migrate, readCheckpoint, type Database } from '@trainyard/projections';
import { projectMetrics } from './metrics.ts';

export interface ProjectorOptions {
  batchSize: number;
  /** How long a partial batch waits for more events before it is written. */
  lingerMs: number;
}

export const DEFAULT_PROJECTOR_OPTIONS: ProjectorOptions = { batchSize: 500, lingerMs: 10 };

export interface RunningProjector {
  stop(): Promise<void>;
}

const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 5_000;
/**
 * How long one batch may take before it counts as failed and is tried again. A batch that hangs
 * on a connection to a server that went away would otherwise hold the projector for good (or its
 * stop, which gives the batch up at once); one that later commits after all is harmless, since
 * each batch moves the checkpoint it checks.
 */
const BATCH_DEADLINE_MS = 10_000;

/**
 * Keeps the read models in step with the log. Its position is the checkpoint row written in the
 * same transaction as the rows, so it resumes from the database, and a rebuilt or restored
 * database can never disagree with it. While Postgres is away it holds its batch and retries.
 * Beside the log, it keeps the training metrics that workers publish (`projectMetrics`).
 */
export async function startProjector(
  ctx: ServiceContext,
  db: Kysely<Database>,
  opts: ProjectorOptions = DEFAULT_PROJECTOR_OPTIONS,
): Promise<RunningProjector> {
  const abort = new AbortController();
  const log = ctx.log.child({ component: 'projector' });
  /** PostgreSQL is waited for as long as it takes, until the projector stops. */
  const UNTIL_STOPPED: RetryPolicy = {
    attempts: Infinity,
    baseMs: RETRY_MIN_MS,
    maxMs: RETRY_MAX_MS,
    signal: abort.signal,
  };

  async function untilApplied(batch: StoredEvent[]): Promise<void> {
    await retry(
      () =>
        withDeadline('a projection batch', BATCH_DEADLINE_MS, applyBatch(db, batch), abort.signal),
      {
        ...UNTIL_STOPPED,
        onRetry: (err, _, wait) =>
          log.warn({ err, fromSeq: batch[0]?.seq, wait }, 'projection batch failed; retrying'),
      },
    ).catch((err: unknown) => {
      if (!abort.signal.aborted) throw err;
    });
  }

  async function startSeq(): Promise<number> {
    return retry(
      async () => {
        await migrate(db);
        return (await readCheckpoint(db)) + 1;
      },
      {
        ...UNTIL_STOPPED,
        onRetry: (err, _, wait) => log.warn({ err, wait }, 'database not ready; retrying'),
      },
    );
  }

  async function run(): Promise<void> {
    let batch: StoredEvent[] = [];
    let lingering: NodeJS.Timeout | undefined;
    let writing: Promise<void> = Promise.resolve();
    const flush = () => {
      clearTimeout(lingering);
      lingering = undefined;
      if (batch.length === 0) return writing;
      const full = batch;
      batch = [];
      writing = writing.then(() => untilApplied(full));
      return writing;
    };
    try {
      await ctx.events.follow(
        {
          fromSeq: await startSeq(),
          maxMessages: opts.batchSize * 2,
          signal: abort.signal,
          onStall: (read) => log.warn({ read }, 'projector reader stalled; starting it again'),
          onMiscount: (read) =>
            log.warn({ read }, 'projector reader miscounted; starting it again'),
          onCaughtUp: () => (lingering ??= setTimeout(() => void flush(), opts.lingerMs)),
        },
        (event) => {
          batch.push(event);
          if (batch.length >= opts.batchSize) return flush();
        },
      );
    } finally {
      await flush();
    }
  }

  const done = Promise.all([
    supervise('projector', run, abort.signal, log),
    projectMetrics(ctx, db, abort.signal),
  ]);
  log.info('projector started');
  return {
    stop: async () => {
      abort.abort();
      await done;
    },
  };
}
