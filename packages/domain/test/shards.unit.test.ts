import { describe, expect, it } from 'vitest';
import type { JobEvent } from '@trainyard/events';
import {
  awaitsSharding,
  decideJob,
  DomainError,
  emptyCluster,
  initialJobState,
  plan,
  shardSubmission,
} from '../src/index.ts';
import { given, spec, submit, T0, when, worker } from './given.ts';

const array = (shards = 2, over = {}): JobEvent => ({
  type: 'JobSubmitted',
  data: { owner: 'alice', spec: spec({ shards, resources: { gpus: 1 }, ...over }), build: false },
});

describe('array jobs in the domain', () => {
  it('an array job is neither probed nor placed: its shards are, each probed alone', () => {
    const [event] = decideJob(
      { type: 'SubmitJob', owner: 'alice', spec: spec({ shards: 4, resources: { gpus: 1 } }) },
      initialJobState('job_x'),
    );
    expect(event).toMatchObject({ data: { estimate: false, build: false } });
    const state = given([event!], 'job_x');
    expect(state.status).toBe('queued');
    expect(awaitsSharding(state)).toBe(true);
    const shard = shardSubmission(state, 3);
    expect(shard.spec.env).toMatchObject({
      TRAINYARD_SHARD_INDEX: '3',
      TRAINYARD_SHARD_COUNT: '4',
    });
    const [shardEvent] = decideJob({ type: 'SubmitJob', ...shard }, initialJobState('job_x_3'));
    // Each shard takes its GPUs whole rather than be probed, one probe per shard.
    expect(shardEvent).toMatchObject({ data: { estimate: false, build: false } });

    const cluster = emptyCluster();
    worker(cluster, 'w1', [24, 24]);
    submit(cluster, 'job_x', { shards: 2 });
    expect(plan(cluster, T0).assignments).toEqual([]);
  });

  it('a shard runs what its array job was built into, without a build of its own', () => {
    const artifact = { key: 'artifacts/job_x.tar.gz', sizeBytes: 10, sha256: 'a'.repeat(64) };
    const image = { ref: 'reg/job_x@sha256:' + 'b'.repeat(64), digest: 'sha256:' + 'b'.repeat(64) };
    const state = given(
      [
        { type: 'JobSubmitted', data: { owner: 'alice', spec: spec({ shards: 2 }), build: true } },
        { type: 'JobBuildStarted', data: { builderId: 'b1' } },
        { type: 'JobBuilt', data: { artifact, image, durationMs: 5 } },
      ],
      'job_x',
    );
    expect(awaitsSharding(state)).toBe(true);
    const shard = given(
      decideJob({ type: 'SubmitJob', ...shardSubmission(state, 0) }, initialJobState('job_x_0')),
      'job_x_0',
    );
    expect(shard).toMatchObject({
      status: 'queued',
      artifact,
      image,
      shardOf: { jobId: 'job_x', index: 0, count: 2 },
    });
  });

  it('records its shards once, and ends only when every shard has', () => {
    expect(when([array()], { type: 'RecordSharded' })).toEqual([
      { type: 'JobSharded', data: { count: 2 } },
    ]);
    const sharded: JobEvent[] = [array(), { type: 'JobSharded', data: { count: 2 } }];
    expect(when(sharded, { type: 'RecordSharded' })).toEqual([]);
    expect(
      when(sharded, {
        type: 'FinishShards',
        outcomes: { job_1_0: 'succeeded', job_1_1: 'running' },
      }),
    ).toEqual([]);
    expect(when(sharded, { type: 'FinishShards', outcomes: { job_1_0: 'succeeded' } })).toEqual([]);
    expect(
      when(sharded, { type: 'FinishShards', outcomes: { job_1_0: 'succeeded', job_1_1: 'none' } }),
    ).toMatchObject([{ type: 'JobShardsEnded', data: { status: 'failed', failed: 1 } }]);
    const ended = when(sharded, {
      type: 'FinishShards',
      outcomes: { job_1_0: 'succeeded', job_1_1: 'succeeded' },
    });
    expect(ended).toMatchObject([
      { type: 'JobShardsEnded', data: { status: 'succeeded', succeeded: 2 } },
    ]);
    expect(given([...sharded, ...ended]).status).toBe('succeeded');
    // Held, or waiting on a dependency, it is not sharded.
    expect(() => when([array(2, { dependsOn: ['job_d'] })], { type: 'RecordSharded' })).toThrow(
      DomainError,
    );
    expect(() => when(sharded, { type: 'HoldJob', by: 'owner', reason: '' })).toThrow(
      /hold its shards/,
    );
    // Nor once its shards may be being submitted: a hold would stop that half way.
    expect(() => when([array()], { type: 'HoldJob', by: 'owner', reason: '' })).toThrow(
      /hold its shards/,
    );
    const waiting = [array(2, { dependsOn: ['job_d'] })];
    expect(when(waiting, { type: 'HoldJob', by: 'owner', reason: '' })).toMatchObject([
      { type: 'JobHeld' },
    ]);
  });
});
