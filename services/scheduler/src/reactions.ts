import { DomainError, failure, staleAttempts, type ClusterState } from '@trainyard/domain';
import type { StoredEvent } from '@trainyard/events';
import { runJobCommand } from '@trainyard/application';
import { type ServiceContext } from '@trainyard/service-kit';
import { dispatchStop } from './dispatch.ts';
import { dispatchSessionStop, requeueStaleRuns } from './sessions.ts';

/**
 * Fails the attempts that workers no longer run (lost, left, or registered again without them)
 * as platform failures: the decider retries them with backoff or ends the job.
 */
export async function failStale(
  ctx: ServiceContext,
  cluster: ClusterState,
  workerId?: string,
): Promise<void> {
  for (const { jobId, attemptId, workerId: holder } of staleAttempts(cluster, workerId)) {
    const tracked = cluster.jobs.get(jobId);
    if (!tracked) continue;
    try {
      await runJobCommand(
        ctx.bus.store,
        jobId,
        () => ({
          type: 'FailAttempt',
          attemptId,
          failure: failure('workerLost', `worker ${holder} no longer runs it`),
          now: new Date(),
          jitter: Math.random(),
        }),
        { actor: { kind: 'service', id: ctx.instanceId }, now: new Date() },
        { snapshot: { state: tracked.state, head: tracked.head } },
      );
      ctx.log.warn({ jobId, attemptId, workerId: holder }, 'attempt lost with its worker');
    } catch (err) {
      if (!(err instanceof DomainError)) throw err;
    }
  }
}

/** What a live event sets in motion beyond the cluster state. */
export function react(
  ctx: ServiceContext,
  cluster: ClusterState,
  event: StoredEvent,
): Promise<void> | null {
  switch (event.type) {
    case 'JobCancelRequested':
    case 'JobTimeLimitReached':
    case 'JobPreempted': {
      const job = cluster.jobs.get(event.aggregateId);
      return job ? dispatchStop(ctx.bus.js, job) : null;
    }
    case 'SessionStopRequested': {
      const session = cluster.sessions.get(event.aggregateId);
      return session ? dispatchSessionStop(ctx.bus.js, session) : null;
    }
    case 'WorkerLost':
    case 'WorkerLeft':
    case 'WorkerRegistered':
      return Promise.all([
        failStale(ctx, cluster, event.aggregateId),
        requeueStaleRuns(ctx, cluster, event.aggregateId),
      ]).then(() => undefined);
    default:
      return null;
  }
}

/** After a takeover: whatever the previous leader had not yet failed. */
export async function recover(ctx: ServiceContext, cluster: ClusterState): Promise<void> {
  await Promise.all([failStale(ctx, cluster), requeueStaleRuns(ctx, cluster)]);
}
