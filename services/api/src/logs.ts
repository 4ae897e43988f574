import { PassThrough, type Readable } from 'node:stream';
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

async function writeArchived(blobs: BlobStore, jobId: string, attempts: number, out: PassThrough) {
  for (let n = 0; n <= attempts; n++) {
    const blob = await blobs.get(BlobKeys.log(jobId, n));
    if (!blob) continue;
    for await (const chunk of blob) out.write(chunk);
  }
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
 * Copies the live log to `out`. Without `follow` it stops at `until`, the newest chunk when the
 * request came; with it, once the job has ended and its newest chunk has been read. Both come
 * from the stream itself, not from the reader's count of what waits, which a server can get
 * wrong after a failover.
 */
async function copyLive(
  bus: Bus,
  consumer: Consumer,
  jobId: string,
  until: number,
  follow: boolean,
  out: PassThrough,
  signal: AbortSignal,
): Promise<void> {
  const messages = await consumer.consume();
  const stop = () => messages.stop();
  const forgetAbort = onAbort(signal, stop);
  let lastRead = 0;
  let checking = false;
  const timer = follow
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
    for await (const msg of messages as AsyncIterable<JsMsg>) {
      lastRead = msg.seq;
      out.write(msg.data);
      if (!follow && msg.seq >= until) break;
    }
  } finally {
    clearInterval(timer);
    forgetAbort();
    messages.stop();
  }
}

/**
 * A job's log: from the live stream while it is kept there (attempt 0 is the build), else
 * from the archived copies in the blob store.
 */
export async function openLog(
  bus: Bus,
  blobs: BlobStore,
  jobId: string,
  opts: { follow: boolean; signal: AbortSignal },
): Promise<Readable> {
  const out = new PassThrough();
  const until = await lastChunkSeq(bus, jobId);
  const archived = until === 0 && (!opts.follow || (await jobEnded(bus, jobId)));
  const consumer = archived
    ? null
    : await retryTransient(`read the log of ${jobId}`, () =>
        bus.js.consumers.get(Streams.logs, {
          filter_subjects: Subjects.jobLogs(jobId),
          deliver_policy: DeliverPolicy.All,
        }),
      );
  const pump = async () => {
    if (!consumer) {
      const { state } = await loadJob(bus.store, jobId);
      await writeArchived(blobs, jobId, state.attempts.length, out);
      return;
    }
    await copyLive(bus, consumer, jobId, until, opts.follow, out, opts.signal);
  };
  pump().then(
    () => out.end(),
    (err: unknown) => out.destroy(err as Error),
  );
  return out;
}
