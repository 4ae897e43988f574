import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { JobUsers, releaseUser } from '../src/users.ts';

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

describe('releasing a uid', () => {
  it('says whether it was released, keeping the claim of one whose processes could not be ended', async () => {
    const tmp = await tempDir();
    try {
      let ending: Error | null = new Error('fork: Resource temporarily unavailable');
      const users = new JobUsers(
        async () => {
          if (ending) throw ending;
        },
        2_000_000,
        10,
        tmp.path,
      );
      const user = await users.claim('att_1', tmp.path);
      const errors: unknown[] = [];
      expect(await releaseUser(users, user, (err) => errors.push(err))).toBe(false);
      expect(errors).toEqual([ending]);
      expect(existsSync(join(tmp.path, String(user.uid)))).toBe(true);
      ending = null;
      expect(await releaseUser(users, user, (err) => errors.push(err))).toBe(true);
      expect(existsSync(join(tmp.path, String(user.uid)))).toBe(false);
      expect(await releaseUser(undefined, user, (err) => errors.push(err))).toBe(true);
      expect(errors).toHaveLength(1);
    } finally {
      await tmp.remove();
    }
  });
});
