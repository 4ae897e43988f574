import { DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream';
import { endsJob, type JobState } from '@trainyard/domain';
import {
  getStoredMessage,
  ofAggregate,
  retryTransient,
  Streams,
  Subjects,
} from '@trainyard/events';
import { loadJob } from '@trainyard/application';
import { BlobKeys, getWritten, type BlobStore } from '@trainyard/blobs';
import { onAbort, type Bus } from '@trainyard/service-kit';

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

/**
 * Where a live chunk lies, and who wrote it: its attempt (the subject's fourth token), its
 * offset (its msg id) and its writer (the worker named last; a build has none, nor a chunk
 * shipped before writers were named). Null for a subject no writer of this log uses.
 */
function placeOf(msg: JsMsg): { attempt: number; offset: number; writer: string | null } | null {
  const tokens = msg.subject.split('.');
  const attempt = Number(tokens[3]);
  if (String(attempt) !== tokens[3] || tokens.length > (attempt === 0 ? 4 : 5)) return null;
  const offset = Number(msg.headers?.get('Nats-Msg-Id')?.split('@').pop());
  return {
    attempt,
    offset: Number.isInteger(offset) ? offset : 0,
    writer: tokens[4] ?? null,
  };
}

/**
 * The worker that ran each attempt of the job. An attempt it has not seen sends it back to the
 * job's history, read again only when the job has moved on since (its newest event says): a
 * chunk counts only when the worker that held its attempt wrote it, and chunks for attempts
 * that never were cost one lookup each.
 */
function attemptWorkers(bus: Bus, jobId: string) {
  const known = new Map<number, string>();
  let readAt = -1;
  return async (attempt: number): Promise<string | null> => {
    if (known.has(attempt)) return known.get(attempt)!;
    const newest = (await bus.store.last('job', jobId))?.seq ?? 0;
    if (newest !== readAt) {
      const { state, head } = await loadJob(bus.store, jobId);
      readAt = head.seq;
      for (const a of state.attempts) known.set(a.number, a.workerId);
    }
    return known.get(attempt) ?? null;
  };
}

/** The archived logs: the build's in the shared store, each attempt's where its worker wrote. */
async function* readArchived(
  blobs: BlobStore,
  state: JobState,
  from: LogPosition | undefined,
): AsyncGenerator<LogPiece> {
  const jobId = state.id;
  for (let n = 0; n <= state.attempts.length; n++) {
    const workerId = state.attempts.find((a) => a.number === n)?.workerId;
    if (n > 0 && !workerId) continue;
    const blob = await getWritten(blobs, workerId, BlobKeys.log(jobId, n));
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
  workerOf: (attempt: number) => Promise<string | null>,
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
      const place = placeOf(msg);
      // A chunk of an attempt that names no writer was shipped before writers were named: only
      // the control plane may still publish such a subject.
      const ours =
        place !== null &&
        (place.attempt === 0 ||
          place.writer === null ||
          place.writer === (await workerOf(place.attempt)));
      const part = ours && after(opts.from, place.attempt, place.offset, msg.data);
      if (part) yield { kind: 'chunk', attempt: place.attempt, ...part };
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
    return readArchived(blobs, state, opts.from);
  }
  const consumer = await retryTransient(`read the log of ${jobId}`, () =>
    bus.js.consumers.get(Streams.logs, {
      filter_subjects: Subjects.jobLogs(jobId),
      deliver_policy: DeliverPolicy.All,
    }),
  );
  return readLive(bus, consumer, jobId, until, attemptWorkers(bus, jobId), opts);
}
