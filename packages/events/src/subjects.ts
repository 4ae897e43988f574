import type { Aggregate } from './catalog.ts';

/** Stream names. */
export const Streams = {
  events: 'TY_EVENTS',
  heartbeats: 'TY_HEARTBEATS',
  dispatch: 'TY_DISPATCH',
  logs: 'TY_LOGS',
  metrics: 'TY_METRICS',
} as const;

const SAFE_TOKEN = /^[A-Za-z0-9_-]{1,128}$/;

/** Throws unless `token` can stand alone as one subject token. */
export function assertSubjectToken(token: string, what: string): string {
  if (!SAFE_TOKEN.test(token)) throw new Error(`${what} "${token}" is not a valid id`);
  return token;
}

/** Subject builders. Ids are checked so that no id can widen a subject. */
export const Subjects = {
  allEvents: 'ty.ev.>',
  aggregateEvents: (aggregate: Aggregate) => `ty.ev.${aggregate}.*`,
  event: (aggregate: Aggregate, id: string) =>
    `ty.ev.${aggregate}.${assertSubjectToken(id, aggregate)}`,
  allHeartbeats: 'ty.hb.>',
  heartbeat: (workerId: string) => `ty.hb.${assertSubjectToken(workerId, 'worker')}`,
  allDispatch: 'ty.dispatch.>',
  dispatchGpu: (workerId: string, gpu: number) =>
    `ty.dispatch.${assertSubjectToken(workerId, 'worker')}.gpu${gpu}`,
  dispatchCpu: (workerId: string) => `ty.dispatch.${assertSubjectToken(workerId, 'worker')}.cpu`,
  dispatchControl: (workerId: string) =>
    `ty.dispatch.${assertSubjectToken(workerId, 'worker')}.ctl`,
  /** Every worker's reports; the token after `ty.report.` names the worker. */
  allReports: 'ty.report.*',
  report: (workerId: string) => `ty.report.${assertSubjectToken(workerId, 'worker')}`,
  /** Every worker's reads of code and artifacts; the token after `ty.fetch.` names the worker. */
  allFetches: 'ty.fetch.*',
  fetch: (workerId: string) => `ty.fetch.${assertSubjectToken(workerId, 'worker')}`,
  /**
   * SSH channels between the gateway and a worker. The gateway writes to a worker on
   * `ty.tun.in.WORKER.…` (opening a channel on `….open`, then frames on `….CHANNEL`); the
   * worker answers on `ty.tun.out.WORKER.CHANNEL`, and may write nowhere else, so no worker can
   * speak in another's channels.
   */
  tunnelIn: (workerId: string) => `ty.tun.in.${assertSubjectToken(workerId, 'worker')}`,
  tunnelOut: (workerId: string) => `ty.tun.out.${assertSubjectToken(workerId, 'worker')}`,
  allTunnelsIn: 'ty.tun.in.>',
  allTunnelsOut: 'ty.tun.out.>',
  /** Requests to the leading scheduler about the queue (`QueueRequest`). */
  queue: 'ty.sched.queue',
  allLogs: 'ty.log.>',
  /** Every chunk of a job's log: its build's and each attempt's. */
  jobLogs: (jobId: string) => `ty.log.${assertSubjectToken(jobId, 'job')}.>`,
  /**
   * One attempt's log. The build (attempt 0) writes `ty.log.JOB.0`; attempt N, run by a
   * worker, `ty.log.JOB.N.WORKER`: a worker may write only under its own name, and a reader
   * takes an attempt's chunks only from the worker that held it.
   */
  attemptLogs: (jobId: string, attempt: number, workerId: string | null) =>
    attempt === 0
      ? `ty.log.${assertSubjectToken(jobId, 'job')}.0`
      : `ty.log.${assertSubjectToken(jobId, 'job')}.${attempt}.${assertSubjectToken(workerId ?? '', 'worker')}`,
  allMetrics: 'ty.metric.>',
  /**
   * One attempt's training metrics, `ty.metric.JOB.N.WORKER`: like its log, a worker may write
   * only under its own name, and a reader takes an attempt's points only from the worker that
   * held it.
   */
  attemptMetrics: (jobId: string, attempt: number, workerId: string) =>
    `ty.metric.${assertSubjectToken(jobId, 'job')}.${attempt}.${assertSubjectToken(workerId, 'worker')}`,
} as const;
