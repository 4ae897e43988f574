import { describe, expect, it } from 'vitest';
import { watchForStall } from '../src/index.ts';

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('stall watch', () => {
  it('stops a reader that got nothing while the log moved on', async () => {
    let stopped = 0;
    const watch = watchForStall({
      readUpTo: 5,
      stallMs: 100,
      lastSeq: async () => 9,
      stop: () => stopped++,
    });
    watch.touch(6);
    await wait(350);
    watch.dispose();
    expect(stopped).toBeGreaterThanOrEqual(1);
  });

  it('leaves alone a reader that is idle because the log is idle', async () => {
    let stopped = 0;
    const watch = watchForStall({
      readUpTo: 5,
      stallMs: 100,
      lastSeq: async () => 7,
      stop: () => stopped++,
    });
    watch.touch(7);
    await wait(350);
    watch.dispose();
    expect(stopped).toBe(0);
  });

  it('leaves alone a reader that keeps receiving', async () => {
    let stopped = 0;
    const watch = watchForStall({
      readUpTo: 0,
      stallMs: 150,
      lastSeq: async () => 1_000,
      stop: () => stopped++,
    });
    for (let seq = 1; seq <= 10; seq++) {
      watch.touch(seq);
      await wait(40);
    }
    watch.dispose();
    expect(stopped).toBe(0);
  });
});
