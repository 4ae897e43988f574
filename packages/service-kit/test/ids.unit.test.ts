import { describe, expect, it } from 'vitest';
import { newId } from '../src/ids.ts';

describe('newId', () => {
  it('is a prefix, ten characters of time and twelve of randomness, safe in a subject', () => {
    expect(newId('job')).toMatch(/^job_[0-9a-hjkmnp-tv-z]{22}$/);
  });

  it('sorts by time and does not repeat, across many refills of its random pool', () => {
    const ids = Array.from({ length: 5_000 }, (_, i) => newId('job', 1_700_000_000_000 + i));
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    const sameTime = Array.from({ length: 5_000 }, () => newId('job', 1_700_000_000_000));
    expect(new Set(sameTime).size).toBe(sameTime.length);
  });
});
