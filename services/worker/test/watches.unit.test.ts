import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { watchTimeLimit } from '../src/watches.ts';

const DAY = 86_400_000;

beforeEach(() => vi.useFakeTimers({ now: 0 }));
afterEach(() => vi.useRealTimers());

describe('the worker’s stop at a time limit', () => {
  it('waits out a deadline past what one timer holds, and stops only then', async () => {
    const kill = vi.fn(() => Promise.resolve());
    let reached = 0;
    watchTimeLimit(kill, {
      deadlineMs: 30 * DAY + 60_000,
      onReached: () => reached++,
      onStopFailed: () => undefined,
    });
    await vi.advanceTimersByTimeAsync(25 * DAY);
    expect(kill).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(5 * DAY + 59_000);
    expect(kill).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(kill).toHaveBeenCalledTimes(1);
    expect(reached).toBe(1);
  });

  it('tries a stop that failed again, a few times, and not after the watch ends', async () => {
    const kill = vi.fn(() => Promise.reject(new Error('the runtime is away')));
    const failed: unknown[] = [];
    watchTimeLimit(kill, {
      deadlineMs: 1_000,
      onReached: () => undefined,
      onStopFailed: (err) => failed.push(err),
    });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(kill).toHaveBeenCalledTimes(4);
    expect(failed).toHaveLength(4);
    const never = vi.fn(() => Promise.resolve());
    const unwatch = watchTimeLimit(never, {
      deadlineMs: Date.now() + 2_000,
      onReached: () => undefined,
      onStopFailed: () => undefined,
    });
    unwatch();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(never).not.toHaveBeenCalled();
  });
});
