import { describe, expect, it } from 'vitest';
import { FailureWindow, LoginRateLimit, sourceOf } from '../src/rate-limit.ts';

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
    limit.begin('10.0.0.1', 's1', 'password');
    limit.begin('10.0.0.1', 's2', 'password');
    expect(limit.limited('10.0.0.1', 's3', 'password')).toBe(true);
    expect(limit.limited('10.0.0.1', 's3', 'publickey')).toBe(true);
    expect(limit.limited('10.0.0.2', 's1', 'password')).toBe(false);
    limit.begin('10.0.0.2', 's1', 'password');
    limit.begin('10.0.0.3', 's1', 'password');
    expect(limit.limited('10.0.0.4', 's1', 'password')).toBe(true);
    now = 60_001;
    expect(limit.limited('10.0.0.1', 's1', 'password')).toBe(false);
    limit.stop();
  });

  it('never refuses a key by its session name: others’ failures cannot lock its owner out', () => {
    const limit = new LoginRateLimit({ failuresPerSource: 2, failuresPerUser: 2 });
    for (const source of ['10.0.0.1', '10.0.0.2', '10.0.0.3']) {
      limit.begin(source, 's1', 'password');
      limit.begin(source, 's1', 'publickey');
    }
    expect(limit.limited('10.0.0.9', 's1', 'password')).toBe(true);
    expect(limit.limited('10.0.0.9', 's1', 'publickey')).toBe(false);
    // A key's failures count against its source alone.
    limit.begin('10.0.0.8', 's2', 'publickey');
    limit.begin('10.0.0.8', 's2', 'publickey');
    expect(limit.limited('10.0.0.8', 's3', 'publickey')).toBe(true);
    expect(limit.limited('10.0.0.7', 's2', 'password')).toBe(false);
    limit.stop();
  });

  it('counts a login from when it is asked about, and takes the count back when told', () => {
    const limit = new LoginRateLimit({ failuresPerSource: 2, failuresPerUser: 5 });
    const first = limit.begin('10.0.0.1', 's1', 'password');
    const second = limit.begin('10.0.0.1', 's1', 'password');
    expect(limit.limited('10.0.0.1', 's1', 'password')).toBe(true);
    first();
    expect(limit.limited('10.0.0.1', 's1', 'password')).toBe(false);
    second();
    limit.begin('10.0.0.1', 's1', 'password');
    expect(limit.limited('10.0.0.1', 's1', 'password')).toBe(false);
    limit.stop();
  });
});

describe('the source a login is counted against', () => {
  it('is the IPv4 address, or the /64 network of an IPv6 one, however written', () => {
    expect(sourceOf('10.1.2.3')).toBe('10.1.2.3');
    expect(sourceOf('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(sourceOf('2001:db8:0:1:aaaa::1')).toBe('2001:db8:0:1::/64');
    expect(sourceOf('2001:0DB8:0000:0001:ffff:1:2:3')).toBe('2001:db8:0:1::/64');
    expect(sourceOf('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(sourceOf('::1')).toBe('0:0:0:0::/64');
    expect(sourceOf('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
  });
});
