import { AckPolicy, DeliverPolicy, type JsMsg } from '@nats-io/jetstream';
import type { Kysely } from 'kysely';
import {
  MetricBatchSchema,
  retry,
  retryTransient,
  Streams,
  Subjects,
  type MetricBatch,
} from '@trainyard/events';
import {
  supervise,
  takeFromDurable,
  withDeadline,
  type ServiceContext,
} from '@trainyard/service-kit';
import { recordMetrics, type Database, type MetricsOrigin } from '@trainyard/projections';

/** The projector's consumer of the metrics stream, shared by every projector. */
const METRICS_CONSUMER = 'projector-metrics';
const WRITE_DEADLINE_MS = 10_000;
const ACK_WAIT_MS = 60_000;
const SUBJECT = /^ty\.metric\.([A-Za-z0-9_-]{1,128})\.(\d{1,9})\.([A-Za-z0-9_-]{1,128})$/;

/** The job, attempt and worker a metrics subject names; null for one no worker could send. */
function metricsOrigin(subject: string): MetricsOrigin | null {
  const match = SUBJECT.exec(subject);
  if (!match) return null;
  return { jobId: match[1]!, attempt: Number(match[2]), workerId: match[3]! };
}

/**
 * Keeps the training metrics that workers publish in `job_metrics` until `signal` aborts. Each
 * message is acked once its points are committed; while PostgreSQL is away (or the table is not
 * made yet) they wait and are tried again, one at a time. A message that is not a batch of points
 * from a worker's subject, or that PostgreSQL refuses for what it holds, is logged and dropped.
 * A write in flight when `signal` aborts is given up unacked: the message comes again, and its
 * points, kept once by their place, are not kept twice.
 */
export async function projectMetrics(
  ctx: ServiceContext,
  db: Kysely<Database>,
  signal: AbortSignal,
): Promise<void> {
  const log = ctx.log.child({ component: 'metrics-projector' });
  const open = () =>
    retryTransient('open the metrics consumer', async () => {
      await ctx.bus.jsm.consumers.add(Streams.metrics, {
        durable_name: METRICS_CONSUMER,
        filter_subject: Subjects.allMetrics,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: ACK_WAIT_MS * 1_000_000,
        max_ack_pending: 256,
      });
      return ctx.bus.js.consumers.get(Streams.metrics, METRICS_CONSUMER);
    });

  let writing: Promise<void> = Promise.resolve();
  /** The stream sequences of the messages waiting here: one delivered again is not taken twice. */
  const held = new Set<number>();
  const keep = async (msg: JsMsg, origin: MetricsOrigin, batch: MetricBatch) => {
    if (signal.aborted) return;
    try {
      await retry(
        () =>
          withDeadline(
            'a metrics batch',
            WRITE_DEADLINE_MS,
            recordMetrics(db, origin, batch.points),
            signal,
          ),
        {
          attempts: Infinity,
          baseMs: 100,
          maxMs: 5_000,
          signal,
          retryable: (err) => !refusedForWhatItHolds(err),
          onRetry: (err, _, wait) => {
            // It is being worked on: the server keeps it for this projector meanwhile.
            msg.working();
            log.warn({ err, wait }, 'metrics batch failed; retrying');
          },
        },
      );
      msg.ack();
    } catch (err) {
      if (!refusedForWhatItHolds(err)) throw err;
      log.error({ err, subject: msg.subject }, 'metrics batch refused by the database; dropped');
      msg.term();
    }
  };
  const handle = (msg: JsMsg) => {
    if (held.has(msg.seq)) return;
    const origin = metricsOrigin(msg.subject);
    const batch = origin ? MetricBatchSchema.safeParse(safeJson(msg)) : null;
    if (!origin || !batch?.success) {
      log.warn({ subject: msg.subject }, 'not a batch of metrics; dropped');
      msg.term();
      return;
    }
    held.add(msg.seq);
    writing = writing
      .then(() => keep(msg, origin, batch.data))
      .catch((err: unknown) => {
        if (!signal.aborted) log.error({ err }, 'metrics batch not kept; it comes again');
      })
      .finally(() => held.delete(msg.seq));
  };
  try {
    await supervise(
      'metrics-projector',
      async () => takeFromDurable(await open(), handle, signal, { maxMessages: 64 }),
      signal,
      log,
    );
  } finally {
    await writing;
  }
}

/**
 * Whether PostgreSQL refused a statement for the data it holds (SQLSTATE classes 22, data
 * exceptions, and 23, integrity): sent again, it would be refused again.
 */
function refusedForWhatItHolds(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && /^2[23][0-9A-Z]{3}$/.test(code);
}

function safeJson(msg: JsMsg): unknown {
  try {
    return msg.json();
  } catch {
    return null;
  }
}
