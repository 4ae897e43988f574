import { DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream';
import { endsJob, type AttemptState } from '@trainyard/domain';
import {
  getStoredMessage,
  ofAggregate,
  retryTransient,
  Streams,
  Subjects,
} from '@trainyard/events';
import { loadJob, loadSession } from '@trainyard/application';
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

/**
 * Whose log is read: a job's (its build is attempt 0, then one part per attempt) or a session's
 * (its image build, attempt 0, alone).
 */
export interface LogOwner {
  id: string;
  /** Whether nothing more will be written to the log. */
  ended(): Promise<boolean>;
  /** The worker that held attempt N (`N > 0`), whose chunks alone count; null for none. */
  workerOf(attempt: number): Promise<string | null>;
  /** The parts whose archived copies there may be, in order, with the worker that wrote each. */
  parts(): Promise<{ attempt: number; workerId?: string }[]>;
  /**
   * A gang member's log (rank 1 and on): only what its workers wrote counts (no build, nothing
   * unnamed), archived under its own key.
   */
  rank?: number;
}

/**
 * A job's log: its build's, then each attempt's, written by the worker that held it; with `rank`
 * (1 and on), what that member of a gang wrote of each attempt, on the worker that ran it.
 */
export function jobLog(bus: Bus, jobId: string, rank = 0): LogOwner {
  return {
    id: jobId,
    ended: async () => {
      const last = await bus.store.last('job', jobId);
      return last !== null && ofAggregate(last, 'job') && endsJob(last);
    },
    workerOf: attemptWorkers(bus, jobId, rank),
    parts: async () => {
      const { state } = await loadJob(bus.store, jobId);
      const parts = state.attempts.flatMap((a) => {
        const workerId = memberWorker(a, rank);
        return workerId === undefined ? [] : [{ attempt: a.number, workerId }];
      });
      return rank === 0 ? [{ attempt: 0 }, ...parts] : parts;
    },
    ...(rank > 0 && { rank }),
  };
}

/** The worker that ran rank `rank` of an attempt (0: the attempt's own), if it had one. */
const memberWorker = (a: AttemptState, rank: number) =>
  rank === 0 ? a.workerId : a.members[rank - 1]?.workerId;

/** A session's log: the build of its image, ended once the session no longer builds. */
export function sessionBuildLog(bus: Bus, sessionId: string): LogOwner {
  return {
    id: sessionId,
    ended: async () => {
      const { status } = (await loadSession(bus.store, sessionId)).state;
      return status !== 'building' && status !== 'none';
    },
    workerOf: () => Promise.resolve(null),
    parts: () => Promise.resolve([{ attempt: 0 }]),
  };
}

/** The stream sequence of the owner's newest live log chunk, 0 when none is kept. */
async function lastChunkSeq(bus: Bus, id: string): Promise<number> {
  const last = await getStoredMessage(
    bus.jsm,
    Streams.logs,
    { last_by_subj: Subjects.jobLogs(id) },
    `read the log of ${id}`,
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
function attemptWorkers(bus: Bus, jobId: string, rank: number) {
  const known = new Map<number, string>();
  let readAt = -1;
  return async (attempt: number): Promise<string | null> => {
    if (known.has(attempt)) return known.get(attempt)!;
    const newest = (await bus.store.last('job', jobId))?.seq ?? 0;
    if (newest !== readAt) {
      const { state, head } = await loadJob(bus.store, jobId);
      readAt = head.seq;
      for (const a of state.attempts) {
        const workerId = memberWorker(a, rank);
        if (workerId !== undefined) known.set(a.number, workerId);
      }
    }
    return known.get(attempt) ?? null;
  };
}

/** The archived logs: the build's in the shared store, each attempt's where its worker wrote. */
async function* readArchived(
  blobs: BlobStore,
  owner: LogOwner,
  from: LogPosition | undefined,
): AsyncGenerator<LogPiece> {
  for (const { attempt: n, workerId } of await owner.parts()) {
    if (n > 0 && !workerId) continue;
    const key = owner.rank
      ? BlobKeys.memberLog(owner.id, n, owner.rank)
      : BlobKeys.log(owner.id, n);
    const blob = await getWritten(blobs, workerId, key);
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
  owner: LogOwner,
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
        void owner
          .ended()
          .then(async (ended) => ended && (await lastChunkSeq(bus, owner.id)) <= at && stop())
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
      // the control plane may still publish such a subject. A gang member's log holds neither
      // those nor the build.
      let ours = false;
      if (place !== null && (place.attempt === 0 || place.writer === null)) ours = !owner.rank;
      else if (place !== null) ours = place.writer === (await owner.workerOf(place.attempt));
      const part = ours && place && after(opts.from, place.attempt, place.offset, msg.data);
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
 * A log, piece by piece: from the live stream while it is kept there (attempt 0 is the build),
 * else from the archived copies in the blob store.
 */
export async function readLog(
  bus: Bus,
  blobs: BlobStore,
  owner: LogOwner,
  opts: ReadLogOptions,
): Promise<AsyncGenerator<LogPiece>> {
  const until = await lastChunkSeq(bus, owner.id);
  const archived = until === 0 && (!opts.follow || (await owner.ended()));
  if (archived) return readArchived(blobs, owner, opts.from);
  const consumer = await retryTransient(`read the log of ${owner.id}`, () =>
    bus.js.consumers.get(Streams.logs, {
      filter_subjects: Subjects.jobLogs(owner.id),
      deliver_policy: DeliverPolicy.All,
    }),
  );
  return readLive(bus, consumer, owner, until, opts);
}
