import { describe, expect, it } from 'vitest';
import { JobUsers } from '../src/users.ts';

describe('the uids jobs run as', () => {
  const endAll = async () => undefined;

  it('take a range of ids a job may run as', () => {
    expect(() => new JobUsers(endAll, 2_000_000, 1_000_000)).not.toThrow();
    expect(() => new JobUsers(endAll, 4_294_966_295, 1_000)).not.toThrow();
  });

  it('refuse system accounts and ids the kernel would read as another', () => {
    for (const [first, count] of [
      [999, 10],
      [0, 1],
      [4_294_966_296, 1_000],
      [4_294_967_295, 1],
      [2_000_000, 0],
    ] as const)
      expect(() => new JobUsers(endAll, first, count)).toThrow(
        `not a range of job uids: ${first}+${count}`,
      );
  });
});
