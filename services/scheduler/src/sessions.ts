import type { JetStreamClient } from '@nats-io/jetstream';
import {
  DomainError,
  runHolder,
  staleRuns,
  type Assignment,
  type ClusterState,
} from '@trainyard/domain';
import { Subjects, type DispatchMessage } from '@trainyard/events';
import { runSessionCommand, type SessionSnapshot } from '@trainyard/application';
import { newId, publishReliably, type ServiceContext } from '@trainyard/service-kit';

const actorOf = (ctx: ServiceContext) => ({ kind: 'service' as const, id: ctx.instanceId });

/** Sends a worker the session run it was given; the message id makes resends harmless. */
export async function dispatchSessionRun(
  js: JetStreamClient,
  session: SessionSnapshot,
): Promise<void> {
  const { state } = session;
  const run = runHolder(state);
  if (!run || run.startedAt !== null || state.status !== 'starting') return;
  const message: DispatchMessage = {
    v: state.image ? 4 : 3,
    kind: 'session',
    sessionId: state.id,
    runId: run.id,
    run: run.number,
    gpus: run.gpus,
    resources: {
      vramBytes: run.vramBytes,
      cpus: run.cpus,
      ...(state.spec?.resources.memoryGb && { memoryGb: state.spec.resources.memoryGb }),
    },
    // A session's own image holds its code already.
    ...(state.image ? { image: state.image.ref } : state.code && { code: state.code }),
    headSeq: session.head.seq,
  };
  const subject =
    run.gpus.length > 0
      ? Subjects.dispatchGpu(run.workerId, run.gpus[0]!)
      : Subjects.dispatchCpu(run.workerId);
  await publishReliably(js, subject, JSON.stringify(message), `session-${run.id}`);
}

/** Tells a worker to end a session's run: the session is stopping. */
export async function dispatchSessionStop(
  js: JetStreamClient,
  session: SessionSnapshot,
): Promise<void> {
  const run = runHolder(session.state);
  if (!run || session.state.status !== 'stopping') return;
  const message: DispatchMessage = {
    v: 3,
    kind: 'sessionStop',
    sessionId: session.state.id,
    runId: run.id,
  };
  await publishReliably(
    js,
    Subjects.dispatchControl(run.workerId),
    JSON.stringify(message),
    `session-stop-${run.id}`,
  );
}

/**
 * Appends a session's placement and sends it to the worker: the sequence it landed at, 0 when
 * it no longer applies.
 */
export async function assignSession(
  ctx: ServiceContext,
  cluster: ClusterState,
  a: Assignment,
  now: Date,
): Promise<number> {
  const tracked = cluster.sessions.get(a.id);
  if (!tracked) return 0;
  try {
    const result = await runSessionCommand(
      ctx.bus.store,
      a.id,
      {
        type: 'AssignSession',
        runId: newId('run'),
        workerId: a.workerId,
        gpus: a.gpus,
        vramBytes: a.vramBytes,
        cpus: a.cpus,
      },
      { actor: actorOf(ctx), now },
      { snapshot: { state: tracked.state, head: tracked.head } },
    );
    dispatchSessionRun(ctx.bus.js, result).catch((err: unknown) =>
      ctx.log.warn({ err, sessionId: a.id }, 'could not send a session run; resent on takeover'),
    );
    return result.head.seq;
  } catch (err) {
    if (!(err instanceof DomainError)) throw err;
    ctx.log.debug({ sessionId: a.id, code: err.code }, 'session placement no longer applies');
    return 0;
  }
}

/**
 * Places again the sessions whose runs' workers are lost, left, or came back without them: what
 * those runs held is gone, which the session says until it runs again.
 */
export async function requeueStaleRuns(
  ctx: ServiceContext,
  cluster: ClusterState,
  workerId?: string,
): Promise<void> {
  for (const { sessionId, runId, workerId: holder } of staleRuns(cluster, workerId)) {
    const tracked = cluster.sessions.get(sessionId);
    if (!tracked) continue;
    try {
      await runSessionCommand(
        ctx.bus.store,
        sessionId,
        {
          type: 'LoseRun',
          runId,
          reason: `worker ${holder} was lost: the session was started again elsewhere, and what it held is gone`,
        },
        { actor: actorOf(ctx), now: new Date() },
        { snapshot: { state: tracked.state, head: tracked.head } },
      );
      ctx.log.warn({ sessionId, runId, workerId: holder }, 'session run lost with its worker');
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
    }
  }
}
