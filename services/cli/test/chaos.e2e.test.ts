import { describe, expect, it } from 'vitest';
import { runChaos } from '../../../bench/chaos.ts';

describe('chaos, shortened', () => {
  it('ends every job, one attempt at a time, with intact chains and projections, while processes are killed', async () => {
    const report = await runChaos({
      jobs: 40,
      workers: 2,
      killEveryMs: 700,
      kills: 6,
      timeoutMs: 90_000,
    });
    expect(report).toMatchObject({
      jobs: 40,
      succeeded: 40,
      notTerminal: 0,
      overlappingAttempts: 0,
      brokenChains: 0,
      projectionsEqualRebuild: true,
      ok: true,
    });
    expect(Object.values(report.kills).reduce((a, b) => a + b, 0)).toBe(6);
  }, 150_000);
});
