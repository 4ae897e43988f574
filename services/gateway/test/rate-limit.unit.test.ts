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

  it('counts a failed password against both the source and the session name', () => {
    let now = 0;
    const limit = new LoginRateLimit(
      { failuresPerSource: 2, failuresPerUser: 3, windowMs: 60_000 },
      () => now,
    );
    limit.failed('10.0.0.1', 's1', 'password');
    limit.failed('10.0.0.1', 's2', 'password');
    expect(limit.limited('10.0.0.1', 's3', 'password')).toBe(true);
    expect(limit.limited('10.0.0.1', 's3', 'publickey')).toBe(true);
    expect(limit.limited('10.0.0.2', 's1', 'password')).toBe(false);
    limit.failed('10.0.0.2', 's1', 'password');
    limit.failed('10.0.0.3', 's1', 'password');
    expect(limit.limited('10.0.0.4', 's1', 'password')).toBe(true);
    now = 60_001;
    expect(limit.limited('10.0.0.1', 's1', 'password')).toBe(false);
    limit.stop();
  });

  it('never refuses a key by its session name: others’ failures cannot lock its owner out', () => {
    const limit = new LoginRateLimit({ failuresPerSource: 2, failuresPerUser: 2 });
    for (const source of ['10.0.0.1', '10.0.0.2', '10.0.0.3']) {
      limit.failed(source, 's1', 'password');
      limit.failed(source, 's1', 'publickey');
    }
    expect(limit.limited('10.0.0.9', 's1', 'password')).toBe(true);
    expect(limit.limited('10.0.0.9', 's1', 'publickey')).toBe(false);
    // A key's failures count against its source alone.
    limit.failed('10.0.0.8', 's2', 'publickey');
    limit.failed('10.0.0.8', 's2', 'publickey');
    expect(limit.limited('10.0.0.8', 's3', 'publickey')).toBe(true);
    expect(limit.limited('10.0.0.7', 's2', 'password')).toBe(false);
    limit.stop();
  });
});
