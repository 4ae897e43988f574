import { describe, expect, it } from 'vitest';
import { logLimitBytes, uidRange } from '../src/worker-options.ts';

describe('TRAINYARD_JOB_UIDS', () => {
  it('gives the range of uids jobs run as, from its first to its last', () => {
    expect(uidRange({ TRAINYARD_JOB_UIDS: '5000-5999' })).toEqual({ first: 5000, count: 1000 });
    expect(uidRange({ TRAINYARD_JOB_UIDS: '4294967000-4294967294' })).toEqual({
      first: 4_294_967_000,
      count: 295,
    });
    expect(uidRange({})).toEqual({ first: 2_000_000, count: 1_000_000 });
  });

  it('is refused with a system account in it, or an id the kernel would read as another', () => {
    for (const raw of ['999-2000', '5000-4294967295', '4294967296-4294967300', '6000-5000', 'a-b'])
      expect(() => uidRange({ TRAINYARD_JOB_UIDS: raw })).toThrow(
        `TRAINYARD_JOB_UIDS must be FIRST-LAST, from 1000 to 4294967294, not "${raw}"`,
      );
  });
});

describe('TRAINYARD_LOG_LIMIT_MB', () => {
  it('gives how much of an attempt’s log is kept, 1 GiB unless said', () => {
    expect(logLimitBytes({ TRAINYARD_LOG_LIMIT_MB: '64' })).toBe(64 * 1024 ** 2);
    expect(logLimitBytes({})).toBe(1024 ** 3);
    expect(logLimitBytes({ TRAINYARD_LOG_LIMIT_MB: '' })).toBe(1024 ** 3);
  });

  it('is refused unless a whole number of MiB, 1 or more', () => {
    for (const raw of ['0', '-1', '1.5', '1e3', 'lots', '99999999999'])
      expect(() => logLimitBytes({ TRAINYARD_LOG_LIMIT_MB: raw })).toThrow(
        `TRAINYARD_LOG_LIMIT_MB must be a whole number of MiB, 1 or more, not "${raw}"`,
      );
  });
});
