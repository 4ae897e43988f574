import { DomainError } from '@trainyard/domain';
import { runSessionCommand, type ReportReply, type SessionReport } from '@trainyard/application';
import type { ServiceContext } from '@trainyard/service-kit';

/** A session report from a worker that does not hold the run it names. */
export class NotYourRun extends DomainError {}

/**
 * Appends what a worker reports of a session's run, only if that worker holds the run, decided
 * on the session as the log has it. A run the log has moved on from (stopped, placed elsewhere)
 * is refused as `STALE_RUN`, which tells the worker to end what it holds of it.
 */
export async function onSessionReport(
  ctx: ServiceContext,
  workerId: string,
  sessionId: string,
  report: SessionReport,
): Promise<ReportReply> {
  const result = await runSessionCommand(
    ctx.bus.store,
    sessionId,
    (state) => {
      const holder = state.runs.find((r) => r.id === report.runId)?.workerId;
      if (holder !== workerId) {
        throw new NotYourRun(
          'STALE_RUN',
          `run ${report.runId} of session ${sessionId} is not held by worker ${workerId}`,
        );
      }
      return report;
    },
    { actor: { kind: 'service', id: `worker:${workerId}` }, now: new Date() },
  );
  return { ok: true, seq: result.head.seq, applied: result.events.length > 0 };
}
