import { describe, expect, it } from 'vitest';
import { EventStoreError, isTransient, retryTransient } from '../src/index.ts';

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
