import { describe, expect, it } from 'vitest';
import { BlobKeys } from '@trainyard/blobs';
import { heldFor, mayRead } from '../src/fetches.ts';

describe('what a worker may read for the attempt it holds', () => {
  const shard = {
    runs: [BlobKeys.artifact('job_array')],
    outputs: { attemptId: 'att_before', workerId: 'w1' },
  };

  it('a shard reads what its array job was built into, and nothing of another job', () => {
    const artifact = BlobKeys.artifact('job_array');
    expect(heldFor({ key: artifact, cursor: null, job: 'job_array_3' })).toBe('job_array_3');
    expect(heldFor({ key: artifact, cursor: null })).toBe('job_array');
    expect(mayRead(shard, artifact)).toBe(true);
    // Naming the shard it holds does not open another job's code or artifact.
    expect(mayRead(shard, BlobKeys.artifact('job_other'))).toBe(false);
    expect(mayRead(shard, BlobKeys.code('job_array'))).toBe(false);
    expect(mayRead(shard, 'snapshots/scheduler')).toBe(false);
  });

  it('outputs are read for the job the key names, whatever job the request names', () => {
    const before = BlobKeys.attemptOutput('job_other', 'att_before', 'ckpt.bin');
    expect(heldFor({ key: before, cursor: null, job: 'job_array_3' })).toBe('job_other');
    expect(mayRead(shard, BlobKeys.attemptOutput('job_array_3', 'att_before', 'ckpt.bin'))).toBe(
      true,
    );
    expect(mayRead(shard, BlobKeys.attemptOutput('job_array_3', 'att_1', 'ckpt.bin'))).toBe(false);
    expect(heldFor({ key: 'jobs/../code', cursor: null, job: 'job_array_3' })).toBeNull();
  });
});
