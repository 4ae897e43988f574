import { buildsFirst } from '@trainyard/domain';
import { ofAggregate, type StoredEvent } from '@trainyard/events';
import type { JobRow } from '../tables/jobs.table.ts';
import type { TableProjector } from './types.ts';

function step(row: JobRow | undefined, event: StoredEvent): JobRow | undefined {
  if (!ofAggregate(event, 'job')) return undefined;
  const at = new Date(event.occurredAt);
  if (event.type === 'JobSubmitted') {
    const { spec, owner } = event.data;
    return {
      id: event.aggregateId,
      name: spec.name,
      owner,
      team: event.data.team ?? null,
      status: buildsFirst(event.data) ? 'submitted' : event.data.estimate ? 'estimating' : 'queued',
      image_digest: event.data.built?.image?.digest ?? null,
      priority: spec.priority,
      command: spec.command,
      image: spec.image ?? null,
      resources: spec.resources,
      estimates: event.data.estimate ?? false,
      estimate: null,
      max_retries: spec.maxRetries,
      time_limit: spec.timeLimit ?? null,
      preemptible: spec.preemptible ?? false,
      shards: spec.shards ?? null,
      nodes: spec.nodes ?? null,
      kind: spec.kind ?? 'job',
      health: spec.health ?? null,
      shard_of: event.data.shardOf?.jobId ?? null,
      shard_index: event.data.shardOf?.index ?? null,
      depends_on: spec.dependsOn ?? [],
      dependencies_met: !spec.dependsOn,
      held_by: event.data.hold ?? null,
      hold_reason: event.data.hold ? '' : null,
      env_names: Object.keys(spec.env).sort(),
      created_at: at,
      started_at: null,
      finished_at: null,
      exit_code: null,
      failure: null,
      retry_at: null,
      attempt_count: 0,
      outputs: [],
      outputs_attempt_id: null,
      last_seq: event.seq,
    };
  }
  if (!row) return undefined;
  const next = { ...row, last_seq: event.seq };
  switch (event.type) {
    case 'JobBuildStarted':
      return { ...next, status: 'building' };
    case 'JobBuilt':
      return {
        ...next,
        status: row.estimates && !row.estimate ? 'estimating' : 'queued',
        image_digest: event.data.image?.digest ?? null,
      };
    case 'JobBuildFailed':
      return { ...next, status: 'failed', failure: event.data.failure, finished_at: at };
    case 'JobAssigned':
      return {
        ...next,
        status: event.data.probe ? 'estimating' : 'assigned',
        attempt_count: event.data.attempt,
        retry_at: null,
      };
    case 'JobStarted':
      return row.status === 'estimating'
        ? next
        : {
            ...next,
            status: 'running',
            started_at: row.started_at ?? at,
            // A service that runs again has no failure: its last end is its attempt's.
            ...(row.kind === 'service' && { exit_code: null, failure: null }),
          };
    case 'JobEstimated':
      return { ...next, status: 'queued', estimate: event.data.estimate };
    case 'JobOutputsSynced':
      return { ...next, outputs: event.data.files, outputs_attempt_id: event.data.attemptId };
    case 'JobSucceeded':
      return { ...next, status: 'succeeded', exit_code: 0, failure: null, finished_at: at };
    case 'JobAttemptFailed': {
      const { retry, exitCode, failure } = event.data;
      const common = { ...next, exit_code: exitCode, failure };
      return retry
        ? { ...common, status: 'retrying', retry_at: new Date(retry.retryAt) }
        : { ...common, status: 'failed', retry_at: null, finished_at: at };
    }
    case 'JobCancelRequested':
    case 'JobMemberStarted':
    case 'JobMemberEnded':
    case 'JobTimeLimitReached':
    case 'JobPreempted':
    case 'JobLogin':
      return next;
    case 'JobDependenciesMet':
      return { ...next, dependencies_met: true };
    case 'JobDependencyFailed':
      return { ...next, status: 'failed', failure: event.data.failure, finished_at: at };
    case 'JobPriorityChanged':
      return { ...next, priority: event.data.priority };
    case 'JobHeld':
      return { ...next, held_by: event.data.by, hold_reason: event.data.reason };
    case 'JobReleased':
      return { ...next, held_by: null, hold_reason: null };
    case 'JobCancelled':
      return {
        ...next,
        status: 'cancelled',
        finished_at: at,
        ...(row.kind === 'service' && { exit_code: null, failure: null }),
      };
    case 'JobSharded':
      return { ...next, status: 'running', started_at: row.started_at ?? at };
    case 'JobShardsEnded':
      return {
        ...next,
        status: event.data.status,
        failure: event.data.failure ?? null,
        finished_at: at,
      };
    default: {
      const never: never = event;
      throw new Error(`unhandled job event ${JSON.stringify(never)}`);
    }
  }
}

/** One row per job: its public status and summary. */
export const jobsProjector: TableProjector<'jobs'> = {
  table: 'jobs',
  primaryKey: 'id',
  jsonColumns: ['resources', 'env_names', 'failure', 'outputs', 'estimate', 'depends_on', 'health'],
  keyOf: (event) => (event.aggregate === 'job' ? event.aggregateId : null),
  apply: step,
};
