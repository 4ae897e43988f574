/**
 * Reports: what a worker tells the control plane about itself and its attempts. A worker does
 * not append to the event log; it sends a report on its own subject (`ty.report.<workerId>`)
 * and waits for the answer. The control plane appends the event only when that worker holds
 * the attempt, deciding on the log as it stands, so a late, fenced or forged report is refused.
 */
import type { NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import {
  FailureSchema,
  OutputFileSchema,
  retryTransient,
  Subjects,
  WorkerLeft,
  WorkerRegistered,
} from '@trainyard/events';

const Id = z.string().regex(/^[A-Za-z0-9_-]{1,128}$/);

export const ProcessExitSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('exited'), exitCode: z.number().int() }),
  z.object({ kind: z.literal('signalled'), signal: z.string().max(32) }),
  z.object({ kind: z.literal('oom') }),
  z.object({ kind: z.literal('launch-error'), message: z.string().max(4096) }),
  z.object({ kind: z.literal('setup-failed'), exitCode: z.number().int() }),
  z.object({ kind: z.literal('lost'), message: z.string().max(4096) }),
]);

/**
 * What a probe measured, as its wrapper wrote it. The job itself can write the file, so its
 * figures are only the job's word about itself, like a declared `vramGb`.
 */
export const ProbeReportSchema = z.object({
  steps: z.number().int().min(0).max(1_000_000),
  done: z.boolean(),
  device: z.enum(['cuda', 'cpu']),
  peakVramBytes: z
    .number()
    .int()
    .min(0)
    .max(2 ** 50)
    .nullable(),
  peakRssBytes: z
    .number()
    .int()
    .min(0)
    .max(2 ** 50),
  stepMs: z.number().min(0).max(1e9).nullable(),
});

/** What a worker may report about an attempt: the time and randomness are the control plane's. */
export const AttemptReportSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('StartAttempt'), attemptId: Id }),
  z.object({
    type: z.literal('SyncOutputs'),
    attemptId: Id,
    files: z.array(OutputFileSchema).max(100_000),
  }),
  z.object({
    type: z.literal('FinishAttempt'),
    attemptId: Id,
    exit: ProcessExitSchema,
    durationMs: z.number().min(0),
    /** The worker stopped it when asked to (a cancel, a time limit): it did not end by itself. */
    stopped: z.boolean().optional(),
    /** The worker stopped it itself, past its job's time limit, no stop having come. */
    timeLimited: z.boolean().optional(),
    /** The worker stopped it, a service, for failing its health check: why. */
    unhealthy: z.string().min(1).max(1024).optional(),
    /** Its health check had never answered healthy. */
    neverHealthy: z.boolean().optional(),
  }),
  z.object({
    type: z.literal('FinishProbe'),
    attemptId: Id,
    exit: ProcessExitSchema,
    report: ProbeReportSchema.nullable(),
    timedOut: z.boolean(),
    durationMs: z.number().min(0),
  }),
  z.object({ type: z.literal('FailAttempt'), attemptId: Id, failure: FailureSchema }),
]);
export type AttemptReport = z.infer<typeof AttemptReportSchema>;

/**
 * What a worker may report about a session's run it holds: started, ended (failed when it ended
 * without being asked to), and its channels' activity (the first opened, the last closed).
 */
export const SessionReportSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('StartRun'), runId: Id }),
  z.object({ type: z.literal('EndRun'), runId: Id, failure: FailureSchema.nullable() }),
  z.object({ type: z.literal('RecordActivity'), runId: Id, active: z.boolean() }),
]);
export type SessionReport = z.infer<typeof SessionReportSchema>;

/**
 * A report, or a question: `job` asks where a job stands (its attempt is named only to the
 * worker that holds it), `self` asks for the worker's own latest event (was it declared lost?).
 */
export const ReportSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('attempt'), jobId: Id, report: AttemptReportSchema }),
  z.object({ kind: z.literal('session'), sessionId: Id, report: SessionReportSchema }),
  z.object({
    kind: z.literal('worker'),
    event: z.discriminatedUnion('type', [WorkerRegistered, WorkerLeft]),
  }),
  z.object({ kind: z.literal('job'), jobId: Id }),
  z.object({ kind: z.literal('self') }),
]);
export type Report = z.infer<typeof ReportSchema>;

/** Where a job stood once a report was decided on: enough for the worker to act on. */
export interface ReportedJob {
  status: string;
  /** The job's current attempt, and whether it is over. */
  attemptId: string | null;
  attemptStatus: string | null;
}

/**
 * The answer to a report. `applied`: the report added events (false when the log already had
 * them). A refusal names why: `BAD_REPORT`, `NOT_YOUR_ATTEMPT`, `NOT_YOURS`, a domain refusal
 * such as `STALE_ATTEMPT`, or `UNAVAILABLE` (the log could not be reached; try again).
 */
export type ReportReply =
  | {
      ok: true;
      seq: number;
      applied: boolean;
      job?: ReportedJob;
      /** For `self`: the worker's latest event, null when it has none. */
      latest?: { seq: number; type: string } | null;
    }
  | { ok: false; code: string; message: string; job?: ReportedJob };

/** How long a report waits for its answer before it is sent again. */
const REPORT_TIMEOUT_MS = 10_000;

/** A report the control plane could not act on now: sent again, like a lost answer. */
class ReportUnavailable extends Error {
  override name = 'ReportUnavailable';
  readonly status = 503;
}

const reportName = (report: Report): string => {
  switch (report.kind) {
    case 'attempt':
    case 'session':
      return report.report.type;
    case 'worker':
      return report.event.type;
    default:
      return `question (${report.kind})`;
  }
};

/**
 * Sends a report and waits for its answer, sending it again after no answer, no responder or a
 * log the control plane could not reach, a bounded number of times. A report is safe to repeat:
 * the control plane decides each one on the log as it stands.
 */
export function sendReport(
  nc: NatsConnection,
  workerId: string,
  report: Report,
): Promise<ReportReply> {
  const subject = Subjects.report(workerId);
  return retryTransient(`report ${reportName(report)}`, async () => {
    const msg = await nc.request(subject, JSON.stringify(report), { timeout: REPORT_TIMEOUT_MS });
    const reply = msg.json<ReportReply>();
    if (!reply.ok && reply.code === 'UNAVAILABLE') throw new ReportUnavailable(reply.message);
    return reply;
  });
}
