import { describe, expect, it } from 'vitest';
import type { MetricSummary } from '@trainyard/events';
import { combineShardSummaries } from '../src/index.ts';

const summary = (over: Partial<MetricSummary>): MetricSummary => ({
  name: 'loss',
  count: 1,
  last: 0,
  min: 0,
  max: 0,
  finalEpoch: null,
  finalEpochMean: 0,
  ...over,
});

describe('an array job’s metrics', () => {
  it('averages each shard’s own last value and final epoch, however far each shard got', () => {
    const byShard = new Map([
      [
        'job_x_0',
        [summary({ count: 4, last: 0.2, min: 0.2, max: 0.9, finalEpoch: 3, finalEpochMean: 0.25 })],
      ],
      [
        'job_x_1',
        [
          summary({ name: 'acc', count: 1, last: 0.8, min: 0.8, max: 0.8, finalEpochMean: 0.8 }),
          summary({ count: 2, last: 0.6, min: 0.6, max: 1.1, finalEpoch: 1, finalEpochMean: 0.75 }),
        ],
      ],
    ]);
    expect(combineShardSummaries(byShard)).toEqual([
      {
        name: 'acc',
        count: 1,
        last: 0.8,
        min: 0.8,
        max: 0.8,
        finalEpoch: null,
        finalEpochMean: 0.8,
      },
      {
        name: 'loss',
        count: 6,
        last: expect.closeTo(0.4, 10) as number,
        min: 0.2,
        max: 1.1,
        finalEpoch: 3,
        finalEpochMean: expect.closeTo(0.5, 10) as number,
      },
    ]);
    expect(combineShardSummaries(new Map())).toEqual([]);
  });
});
