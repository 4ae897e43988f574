import { describe, expect, it } from 'vitest';
import { FailureWindow, LoginRateLimit } from '../src/rate-limit.ts';

describe('failed-login windows', () => {
  it('refuses a key once its failures reach the limit, and forgets them as they age', () => {
    let now = 0;
    const window = new FailureWindow(3, 1_000, () => now);
    window.record('a');
    now = 400;
    window.record('a');
    window.record('a');
    expect(window.exceeded('a')).toBe(true);
    expect(window.exceeded('b')).toBe(false);
    now = 1_001;
    expect(window.exceeded('a')).toBe(false);
    now = 1_401;
    window.record('a');
    expect(window.exceeded('a')).toBe(false);
  });

  it('counts a failure against both the source and the session name', () => {
    let now = 0;
    const limit = new LoginRateLimit(
      { failuresPerSource: 2, failuresPerUser: 3, windowMs: 60_000 },
      () => now,
    );
    limit.failed('10.0.0.1', 's1');
    limit.failed('10.0.0.1', 's2');
    expect(limit.limited('10.0.0.1', 's3')).toBe(true);
    expect(limit.limited('10.0.0.2', 's1')).toBe(false);
    limit.failed('10.0.0.2', 's1');
    limit.failed('10.0.0.3', 's1');
    expect(limit.limited('10.0.0.4', 's1')).toBe(true);
    now = 60_001;
    expect(limit.limited('10.0.0.1', 's1')).toBe(false);
    limit.stop();
  });
});
