import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { withDeadline } from '../src/lifecycle.ts';

const never = new Promise<never>(() => undefined);

describe('withDeadline', () => {
  it('settles as the work does within the deadline', async () => {
    await expect(withDeadline('a sum', 1_000, Promise.resolve(42))).resolves.toBe(42);
    await expect(withDeadline('a sum', 1_000, Promise.reject(new Error('no')))).rejects.toThrow(
      'no',
    );
  });

  it('fails naming the work once the deadline passes', async () => {
    await expect(withDeadline('a batch', 20, never)).rejects.toThrow(
      'a batch took longer than 20 ms',
    );
  });

  it('gives the work up at once when its signal aborts, and when it had already', async () => {
    const abort = new AbortController();
    const started = Date.now();
    const given = withDeadline('a batch', 60_000, never, abort.signal);
    setTimeout(() => abort.abort(), 10);
    await expect(given).rejects.toThrow('a batch was given up');
    expect(Date.now() - started).toBeLessThan(5_000);
    await expect(withDeadline('a batch', 60_000, never, abort.signal)).rejects.toThrow(
      'was given up',
    );
  });

  it('leaves no listener on a signal that outlives it', async () => {
    const abort = new AbortController();
    for (let i = 0; i < 3; i++)
      await withDeadline('a batch', 1_000, Promise.resolve(i), abort.signal);
    await withDeadline('a batch', 20, never, abort.signal).catch(() => undefined);
    expect(getEventListeners(abort.signal, 'abort')).toHaveLength(0);
  });
});
