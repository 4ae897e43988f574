import { describe, expect, it } from 'vitest';
import { runChaos } from '../../../bench/chaos.ts';

describe('chaos, shortened', () => {
  it('ends every job, one attempt at a time, with intact chains and projections, while processes and a NATS server are killed', async () => {
    const report = await runChaos({
      jobs: 40,
      workers: 2,
      killEveryMs: 700,
      kills: 6,
      timeoutMs: 150_000,
    });
    expect(report, JSON.stringify(report)).toMatchObject({
      jobs: 40,
      succeeded: 40,
      notTerminal: 0,
      crashes: 0,
      overlappingAttempts: 0,
      brokenChains: 0,
      projectionsEqualRebuild: true,
      ok: true,
    });
    expect(report.kills).toEqual({ worker: 3, scheduler: 1, nats: 1, projector: 1 });
  }, 200_000);
});
