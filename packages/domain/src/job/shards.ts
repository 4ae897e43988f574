/**
 * Array jobs, like Slurm's job arrays: a job with `shards: N` is built once, then runs as N jobs
 * of its own (`<id>_0` … `<id>_<N-1>`), each placed, retried and cancelled alone with
 * `TRAINYARD_SHARD_INDEX` and `TRAINYARD_SHARD_COUNT`. The array job itself is never placed: it
 * runs while its shards do and ends once they all have.
 */
import type { BlobRef, BuiltImage, JobEvent, JobSpec, JobStatus, ShardOf } from '@trainyard/events';
import { DomainError } from '../errors.ts';
import { failure } from '../failures.ts';
import { isTerminal, type JobState } from './state.ts';

/** Commands on an array job, which the scheduler sends as its shards are submitted and end. */
export type ShardCommand =
  | { type: 'RecordSharded' }
  | { type: 'FinishShards'; outcomes: Record<string, JobStatus | 'none'> };

/** The id of an array job's shard, like Slurm's `<array>_<index>`. */
export const shardId = (jobId: string, index: number) => `${jobId}_${index}`;

/**
 * Whether an array job is ready for its shards to be submitted: built, every job it depends on
 * succeeded, not held, and not yet sharded.
 */
export function awaitsSharding(state: JobState): boolean {
  return (
    state.spec?.shards !== undefined &&
    state.shardCount === 0 &&
    state.status === 'queued' &&
    state.dependenciesMet &&
    !state.held
  );
}

/** The ids of an array job's shards. */
export function shardIds(state: JobState): string[] {
  return Array.from({ length: state.shardCount }, (_, i) => shardId(state.id, i));
}

/** What a shard is submitted with: its array job's spec, owner, team and build. */
export interface ShardSubmission {
  owner: string;
  spec: JobSpec;
  team?: string;
  shardOf: ShardOf;
  built?: { artifact: BlobRef; image?: BuiltImage };
}

/** The submission of an array job's shard `index`. */
export function shardSubmission(state: JobState, index: number): ShardSubmission {
  const spec = state.spec!;
  const count = spec.shards!;
  const { shards: _shards, dependsOn: _dependsOn, ...rest } = spec;
  return {
    owner: state.owner,
    spec: {
      ...rest,
      env: {
        ...spec.env,
        TRAINYARD_SHARD_INDEX: String(index),
        TRAINYARD_SHARD_COUNT: String(count),
      },
    },
    ...(state.team !== null && { team: state.team }),
    shardOf: { jobId: state.id, index, count },
    ...(state.artifact && {
      built: { artifact: state.artifact, ...(state.image && { image: state.image }) },
    }),
  };
}

/** Records that every shard of a ready array job is submitted. */
export function decideSharded(state: JobState): JobEvent[] {
  if (state.shardCount > 0) return [];
  if (!awaitsSharding(state)) {
    throw new DomainError(
      'INVALID_TRANSITION',
      `job ${state.id} is ${state.status}: not an array job ready for its shards`,
    );
  }
  return [{ type: 'JobSharded', data: { count: state.spec!.shards! } }];
}

/**
 * Ends an array job once every shard has ended (`outcomes`, by shard id, as the log has them):
 * succeeded when all did; failed when one failed (or is not in the log); else cancelled.
 * Nothing while a shard still runs.
 */
export function decideShardsEnded(
  state: JobState,
  outcomes: Record<string, JobStatus | 'none'>,
): JobEvent[] {
  if (isTerminal(state.status) || state.shardCount === 0) return [];
  const ids = shardIds(state);
  const ends = ids.map((id) => outcomes[id]);
  if (ends.some((status) => status === undefined || (status !== 'none' && !isTerminal(status))))
    return [];
  const failed = ids.filter((_, i) => ends[i] === 'failed' || ends[i] === 'none');
  const cancelled = ids.filter((_, i) => ends[i] === 'cancelled');
  const succeeded = ids.length - failed.length - cancelled.length;
  const counts = { succeeded, failed: failed.length, cancelled: cancelled.length };
  if (failed.length > 0) {
    const named = failed.slice(0, 5).join(', ') + (failed.length > 5 ? ', …' : '');
    const why = failure(
      'shardFailed',
      `${failed.length} of ${ids.length} shards failed (${named}): see each with trainyard status`,
    );
    return [{ type: 'JobShardsEnded', data: { status: 'failed', ...counts, failure: why } }];
  }
  return [
    {
      type: 'JobShardsEnded',
      data: { status: cancelled.length > 0 ? 'cancelled' : 'succeeded', ...counts },
    },
  ];
}
