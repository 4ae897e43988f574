import { DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream';
import { endsJob } from '@trainyard/domain';
import {
  getStoredMessage,
  ofAggregate,
  retryTransient,
  Streams,
  Subjects,
} from '@trainyard/events';
import { BlobKeys, loadJob, onAbort, type BlobStore, type Bus } from '@trainyard/platform';

const CHECK_MS = 500;

/** A place in a job's log: an attempt (0 is the build) and a byte offset in its output. */
export interface LogPosition {
  attempt: number;
  offset: number;
}

/** What a log reader yields: bytes of one attempt's output, or word that the backlog is out. */
export type LogPiece =
  { kind: 'chunk'; attempt: number; offset: number; data: Uint8Array } | { kind: 'caught-up' };

export interface ReadLogOptions {
  follow: boolean;
  signal: AbortSignal;
  /** Everything up to here was read already: yield only what comes after it. */
  from?: LogPosition;
}

/** Parses `ATTEMPT:OFFSET`, the id of a log event; null when it is not one. */
export function parsePosition(text: string | undefined): LogPosition | null {
  const m = /^(\d{1,6}):(\d{1,15})$/.exec(text ?? '');
  return m ? { attempt: Number(m[1]), offset: Number(m[2]) } : null;
}

/** The part of a chunk at `offset` that lies after `from`, or null when none does. */
function after(
  from: LogPosition | undefined,
  attempt: number,
  offset: number,
  data: Uint8Array,
): { offset: number; data: Uint8Array } | null {
  if (!from || attempt > from.attempt) return { offset, data };
  if (attempt < from.attempt || offset + data.length <= from.offset) return null;
  const skip = Math.max(0, from.offset - offset);
  return { offset: offset + skip, data: data.subarray(skip) };
}

/** Whether the job has ended, from its newest event alone. */
async function jobEnded(bus: Bus, jobId: string): Promise<boolean> {
  const last = await bus.store.last('job', jobId);
  return last !== null && ofAggregate(last, 'job') && endsJob(last);
}

/** The stream sequence of the job's newest live log chunk, 0 when none is kept. */
async function lastChunkSeq(bus: Bus, jobId: string): Promise<number> {
  const last = await getStoredMessage(
    bus.jsm,
    Streams.logs,
    { last_by_subj: Subjects.jobLogs(jobId) },
    `read the log of ${jobId}`,
  );
  return last?.seq ?? 0;
}

/** Where a live chunk lies: its attempt (the subject's last token) and offset (its msg id). */
function placeOf(msg: JsMsg): { attempt: number; offset: number } {
  const attempt = Number(msg.subject.slice(msg.subject.lastIndexOf('.') + 1));
  const offset = Number(msg.headers?.get('Nats-Msg-Id')?.split('@').pop());
  return { attempt, offset: Number.isInteger(offset) ? offset : 0 };
}

async function* readArchived(
  blobs: BlobStore,
  jobId: string,
  attempts: number,
  from: LogPosition | undefined,
): AsyncGenerator<LogPiece> {
  for (let n = 0; n <= attempts; n++) {
    const blob = await blobs.get(BlobKeys.log(jobId, n));
    if (!blob) continue;
    let offset = 0;
    for await (const chunk of blob) {
      const bytes = chunk as Uint8Array;
      const part = after(from, n, offset, bytes);
      offset += bytes.length;
      if (part) yield { kind: 'chunk', attempt: n, ...part };
    }
  }
  yield { kind: 'caught-up' };
}

/**
 * Reads the live log. Without `follow` it stops at `until`, the newest chunk when the request
 * came; with it, once the job has ended and its newest chunk has been read. Both come from the
 * stream itself, not from the reader's count of what waits, which a server can get wrong after a
 * failover.
 */
async function* readLive(
  bus: Bus,
  consumer: Consumer,
  jobId: string,
  until: number,
  opts: ReadLogOptions,
): AsyncGenerator<LogPiece> {
  const messages = await consumer.consume();
  const stop = () => messages.stop();
  const forgetAbort = onAbort(opts.signal, stop);
  let lastRead = 0;
  let checking = false;
  let caughtUp = until === 0;
  const timer = opts.follow
    ? setInterval(() => {
        if (checking) return;
        checking = true;
        const at = lastRead;
        void jobEnded(bus, jobId)
          .then(async (ended) => ended && (await lastChunkSeq(bus, jobId)) <= at && stop())
          .catch(() => undefined)
          .finally(() => (checking = false));
      }, CHECK_MS)
    : undefined;
  try {
    if (caughtUp) yield { kind: 'caught-up' };
    for await (const msg of messages as AsyncIterable<JsMsg>) {
      lastRead = msg.seq;
      const { attempt, offset } = placeOf(msg);
      const part = after(opts.from, attempt, offset, msg.data);
      if (part) yield { kind: 'chunk', attempt, ...part };
      if (!caughtUp && msg.seq >= until) {
        caughtUp = true;
        yield { kind: 'caught-up' };
      }
      if (!opts.follow && msg.seq >= until) break;
    }
  } finally {
    clearInterval(timer);
    forgetAbort();
    messages.stop();
  }
}

/**
 * A job's log, piece by piece: from the live stream while it is kept there (attempt 0 is the
 * build), else from the archived copies in the blob store.
 */
export async function readLog(
  bus: Bus,
  blobs: BlobStore,
  jobId: string,
  opts: ReadLogOptions,
): Promise<AsyncGenerator<LogPiece>> {
  const until = await lastChunkSeq(bus, jobId);
  const archived = until === 0 && (!opts.follow || (await jobEnded(bus, jobId)));
  if (archived) {
    const { state } = await loadJob(bus.store, jobId);
    return readArchived(blobs, jobId, state.attempts.length, opts.from);
  }
  const consumer = await retryTransient(`read the log of ${jobId}`, () =>
    bus.js.consumers.get(Streams.logs, {
      filter_subjects: Subjects.jobLogs(jobId),
      deliver_policy: DeliverPolicy.All,
    }),
  );
  return readLive(bus, consumer, jobId, until, opts);
}
