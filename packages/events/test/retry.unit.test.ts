import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { retryPauseMs, EventStoreError, isTransient, retry, retryTransient } from '../src/index.ts';

const timeout = () => Object.assign(new Error('timeout'), { name: 'TimeoutError' });

describe('retryTransient', () => {
  it('tries again after a transient error and returns the first answer', async () => {
    let calls = 0;
    const value = await retryTransient('read', async () => {
      calls++;
      if (calls < 3) throw timeout();
      return 'ok';
    });
    expect(value).toBe('ok');
    expect(calls).toBe(3);
  });

  it('gives up after a bounded number of tries with EVENT_LOG_UNAVAILABLE', async () => {
    let calls = 0;
    const err = await retryTransient('read the thing', async () => {
      calls++;
      throw timeout();
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EventStoreError);
    expect(err).toMatchObject({
      code: 'EVENT_LOG_UNAVAILABLE',
      message: 'could not read the thing',
    });
    expect(calls).toBe(10);
  });

  it('passes any other error through at once', async () => {
    let calls = 0;
    const bad = new Error('invalid key');
    await expect(
      retryTransient('read', async () => {
        calls++;
        throw bad;
      }),
    ).rejects.toBe(bad);
    expect(calls).toBe(1);
  });

  it('counts no answer, no responders and a leader election as transient', () => {
    expect(isTransient(timeout())).toBe(true);
    expect(isTransient(Object.assign(new Error(), { name: 'NoRespondersError' }))).toBe(true);
    expect(isTransient(Object.assign(new Error(), { status: 503 }))).toBe(true);
    expect(isTransient(Object.assign(new Error(), { code: 10008 }))).toBe(true);
    expect(isTransient(Object.assign(new Error(), { code: 10071 }))).toBe(false);
  });
});

describe('retry', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  /** A call that fails `failures` times, recording when each try started. */
  function flaky(failures: number, err: () => unknown = () => new Error('boom')) {
    const starts: number[] = [];
    const call = async (attempt: number) => {
      starts.push(Date.now());
      if (attempt <= failures) throw err();
      return attempt;
    };
    return { call, starts };
  }

  it('doubles its pauses up to the cap, each drawn between half and all of it', () => {
    expect([1, 2, 3, 4, 5, 6].map((a) => retryPauseMs(a, { jitter: false }))).toEqual([
      200, 400, 800, 1_600, 2_000, 2_000,
    ]);
    expect(retryPauseMs(3, {}, () => 0)).toBe(400);
    expect(retryPauseMs(3, {}, () => 1)).toBe(800);
    expect(retryPauseMs(2, { baseMs: 0 })).toBe(0);
    const drawn = new Set(Array.from({ length: 50 }, () => retryPauseMs(4)));
    expect(drawn.size).toBeGreaterThan(1);
    for (const d of drawn) expect(d).toBeGreaterThanOrEqual(800);
  });

  it('tries again after each pause and returns the first answer', async () => {
    const { call, starts } = flaky(2);
    const retried: number[] = [];
    const done = retry(call, {
      jitter: false,
      onRetry: (_, attempt, pause) => retried.push(attempt, pause),
    });
    await vi.runAllTimersAsync();
    expect(await done).toBe(3);
    expect(retried).toEqual([1, 200, 2, 400]);
    expect(starts.map((t) => t - starts[0]!)).toEqual([0, 200, 600]);
  });

  it('throws the last error once out of tries, and an error not worth retrying at once', async () => {
    const always = flaky(Infinity);
    const out = retry(always.call, { attempts: 4 }).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    expect(await out).toMatchObject({ message: 'boom' });
    expect(always.starts).toHaveLength(4);

    const fatal = flaky(Infinity, () => new TypeError('bad input'));
    const refused = retry(fatal.call, { retryable: (e) => !(e instanceof TypeError) }).catch(
      (e: unknown) => e,
    );
    await vi.runAllTimersAsync();
    expect(await refused).toBeInstanceOf(TypeError);
    expect(fatal.starts).toHaveLength(1);
  });

  it('starts no try past its deadline', async () => {
    const always = flaky(Infinity);
    const out = retry(always.call, { attempts: Infinity, deadlineMs: 1_000, jitter: false }).catch(
      (e: unknown) => e,
    );
    await vi.runAllTimersAsync();
    expect(await out).toMatchObject({ message: 'boom' });
    expect(always.starts.map((t) => t - always.starts[0]!)).toEqual([0, 200, 600]);
  });

  it('tries again at once after an error that already spent the wait', async () => {
    const { call, starts } = flaky(2, () => Object.assign(new Error(), { name: 'TimeoutError' }));
    const done = retry(call, { waited: (e) => (e as Error).name === 'TimeoutError' });
    await vi.runAllTimersAsync();
    expect(await done).toBe(3);
    expect(new Set(starts).size).toBe(1);
  });

  it('stops pausing when its signal aborts, throwing the last error', async () => {
    const stop = new AbortController();
    const always = flaky(Infinity);
    const out = retry(always.call, { attempts: Infinity, baseMs: 10_000, signal: stop.signal })
      .then(() => 'finished')
      .catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(1);
    stop.abort();
    await vi.advanceTimersByTimeAsync(1);
    expect(await out).toMatchObject({ message: 'boom' });
    expect(always.starts).toHaveLength(1);
  });
});
