import { describe, expect, it } from 'vitest';
import { waitFor } from '@trainyard/testkit';
import { watchForStall } from '../src/index.ts';

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

function watch(behind: boolean, stallMs = 100) {
  const seen = { stopped: 0 };
  const w = watchForStall({ stallMs, isBehind: async () => behind, stop: () => seen.stopped++ });
  return { w, seen };
}

describe('stall watch', () => {
  it('stops a reader that got nothing while work waits for it', async () => {
    const { w, seen } = watch(true);
    await waitFor('the stop', () => seen.stopped > 0, { timeoutMs: 2_000 });
    w.dispose();
  });

  it('leaves alone an idle reader when nothing waits for it', async () => {
    const { w, seen } = watch(false);
    await wait(400);
    w.dispose();
    expect(seen.stopped).toBe(0);
  });

  it('leaves alone a reader that keeps receiving', async () => {
    const { w, seen } = watch(true, 200);
    for (let i = 0; i < 10; i++) {
      w.touch();
      await wait(40);
    }
    w.dispose();
    expect(seen.stopped).toBe(0);
  });

  it('stops an idle reader that cannot ask whether work waits', async () => {
    let stopped = 0;
    const w = watchForStall({
      stallMs: 100,
      isBehind: () => Promise.reject(new Error('timeout')),
      stop: () => stopped++,
    });
    await waitFor('the stop', () => stopped > 0, { timeoutMs: 2_000 });
    w.dispose();
  });
});
