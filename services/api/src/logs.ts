import { PassThrough, type Readable } from 'node:stream';
import { DeliverPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream';
import { endsJob } from '@trainyard/domain';
import { ofAggregate, retryTransient, Streams, Subjects } from '@trainyard/events';
import { BlobKeys, loadJob, type BlobStore, type Bus } from '@trainyard/platform';

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

/**
 * Copies the live log to `out`. Without `follow` it stops after the `pending` messages there
 * were; with it, it stops once the job has ended and every message has been read.
 */
async function copyLive(
  bus: Bus,
  consumer: Consumer,
  jobId: string,
  pending: number,
  follow: boolean,
  out: PassThrough,
  signal: AbortSignal,
): Promise<void> {
  const messages = await consumer.consume();
  const stop = () => messages.stop();
  signal.addEventListener('abort', stop, { once: true });
  let read = 0;
  let caughtUp = pending === 0;
  const timer = follow
    ? setInterval(() => {
        if (!caughtUp) return;
        void jobEnded(bus, jobId)
          .then(
            async (ended) =>
              ended && (await consumer.info()).num_pending === 0 && caughtUp && stop(),
          )
          .catch(() => undefined);
      }, CHECK_MS)
    : undefined;
  try {
    for await (const msg of messages as AsyncIterable<JsMsg>) {
      read++;
      caughtUp = msg.info.pending === 0;
      out.write(msg.data);
      if (!follow && read >= pending) break;
    }
  } finally {
    clearInterval(timer);
    signal.removeEventListener('abort', stop);
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
  const { consumer, pending } = await retryTransient(`read the log of ${jobId}`, async () => {
    const consumer = await bus.js.consumers.get(Streams.logs, {
      filter_subjects: Subjects.jobLogs(jobId),
      deliver_policy: DeliverPolicy.All,
    });
    return { consumer, pending: (await consumer.info()).num_pending };
  });
  const pump = async () => {
    if (pending === 0 && (!opts.follow || (await jobEnded(bus, jobId)))) {
      const { state } = await loadJob(bus.store, jobId);
      await writeArchived(blobs, jobId, state.attempts.length, out);
      return;
    }
    await copyLive(bus, consumer, jobId, pending, opts.follow, out, opts.signal);
  };
  pump().then(
    () => out.end(),
    (err: unknown) => out.destroy(err as Error),
  );
  return out;
}
