import { DomainError, failure, orphanedAttempts, type ClusterState } from '@trainyard/domain';
import type { StoredEvent } from '@trainyard/events';
import { runJobCommand, type ServiceContext } from '@trainyard/platform';
import { dispatchStop } from './dispatch.ts';

/**
 * Fails the attempts a worker no longer runs (it was lost, it left, or it came back without
 * them) as a platform failure: the decider retries them with backoff or ends the job.
 */
export async function failOrphans(
  ctx: ServiceContext,
  cluster: ClusterState,
  workerId: string,
  stillRunning: readonly string[],
  why: string,
): Promise<void> {
  for (const { jobId, attemptId } of orphanedAttempts(cluster, workerId, stillRunning)) {
    const tracked = cluster.jobs.get(jobId);
    if (!tracked) continue;
    try {
      await runJobCommand(
        ctx.bus.store,
        jobId,
        () => ({
          type: 'FailAttempt',
          attemptId,
          failure: failure('workerLost', `worker ${workerId} ${why}`),
          now: new Date(),
          jitter: Math.random(),
        }),
        { actor: { kind: 'service', id: ctx.instanceId }, now: new Date() },
        { snapshot: { state: tracked.state, head: tracked.head } },
      );
      ctx.log.warn({ jobId, attemptId, workerId }, `attempt lost: worker ${why}`);
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
    case 'JobCancelRequested': {
      const job = cluster.jobs.get(event.aggregateId);
      return job ? dispatchStop(ctx.bus.js, job) : null;
    }
    case 'WorkerLost':
      return failOrphans(ctx, cluster, event.aggregateId, [], 'was lost');
    case 'WorkerLeft':
      return failOrphans(ctx, cluster, event.aggregateId, [], 'left');
    case 'WorkerRegistered':
      return failOrphans(
        ctx,
        cluster,
        event.aggregateId,
        event.data.runningAttempts,
        'restarted without it',
      );
    default:
      return null;
  }
}

/** After a takeover: attempts on workers that are gone are failed, pending dispatches re-sent. */
export function recover(ctx: ServiceContext, cluster: ClusterState): Promise<void>[] {
  const work: Promise<void>[] = [];
  for (const worker of cluster.workers.values()) {
    if (!worker.online) work.push(failOrphans(ctx, cluster, worker.id, [], 'is gone'));
  }
  return work;
}
