import { DeliverPolicy, type JsMsg } from '@nats-io/jetstream';
import type { Kysely } from 'kysely';
import { decodeEvent, Streams, Subjects, type StoredEvent } from '@trainyard/events';
import { sleep, supervise, watchForStall, type ServiceContext } from '@trainyard/platform';
import { applyBatch, migrate, readCheckpoint, type Database } from '@trainyard/projections';

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
/** A reader that got nothing for this long while the log moved on is started again. */
const STALL_MS = 10_000;

/**
 * Keeps the read models in step with the log. Its position is the checkpoint row written in the
 * same transaction as the rows, so it resumes from the database, and a rebuilt or restored
 * database can never disagree with it. While Postgres is away it holds its batch and retries.
 */
export async function startProjector(
  ctx: ServiceContext,
  db: Kysely<Database>,
  opts: ProjectorOptions = DEFAULT_PROJECTOR_OPTIONS,
): Promise<RunningProjector> {
  const abort = new AbortController();
  const log = ctx.log.child({ component: 'projector' });

  async function untilApplied(batch: StoredEvent[]): Promise<void> {
    for (let wait = RETRY_MIN_MS; !abort.signal.aborted; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
      try {
        await applyBatch(db, batch);
        return;
      } catch (err) {
        log.warn({ err, fromSeq: batch[0]?.seq, wait }, 'projection batch failed; retrying');
        await sleep(wait, abort.signal);
      }
    }
  }

  async function startSeq(): Promise<number> {
    for (let wait = RETRY_MIN_MS; ; wait = Math.min(wait * 2, RETRY_MAX_MS)) {
      try {
        await migrate(db);
        return (await readCheckpoint(db)) + 1;
      } catch (err) {
        if (abort.signal.aborted) throw err;
        log.warn({ err, wait }, 'database not ready; retrying');
        await sleep(wait, abort.signal);
      }
    }
  }

  async function run(): Promise<void> {
    const from = await startSeq();
    const consumer = await ctx.bus.js.consumers.get(Streams.events, {
      filter_subjects: Subjects.allEvents,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: from,
    });
    const messages = await consumer.consume({ max_messages: opts.batchSize * 2 });
    const stop = () => messages.stop();
    abort.signal.addEventListener('abort', stop, { once: true });
    let read = from - 1;
    const stall = watchForStall({
      stallMs: STALL_MS,
      isBehind: async () => (await ctx.bus.store.lastSeq()) > read,
      stop,
      onStall: () => log.warn({ read }, 'projector reader stalled; starting it again'),
    });
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
      for await (const msg of messages as AsyncIterable<JsMsg>) {
        stall.touch();
        read = msg.seq;
        batch.push(decodeEvent(msg));
        if (batch.length >= opts.batchSize) await flush();
        else if (msg.info.pending === 0)
          lingering ??= setTimeout(() => void flush(), opts.lingerMs);
      }
      await flush();
    } finally {
      stall.dispose();
      abort.signal.removeEventListener('abort', stop);
    }
  }

  const done = supervise('projector', run, abort.signal, log);
  log.info('projector started');
  return {
    stop: async () => {
      abort.abort();
      await done;
    },
  };
}
