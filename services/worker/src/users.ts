import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { JOB_IDS } from '@trainyard/runtime';

/** An account an attempt runs as: a uid, and a group of its own with the same number. */
export interface JobUser {
  uid: number;
  gid: number;
}

/** Where the uids held on this host are claimed: cleared at boot, when no attempt runs. */
export const DEFAULT_UID_LOCKS = '/run/trainyard/uids';

/** The uids attempts run as, unless `TRAINYARD_JOB_UIDS` says other: no user or system account's. */
export const DEFAULT_UID_RANGE = { first: 2_000_000, count: 1_000_000 };

/**
 * Gives each attempt an unprivileged uid no other attempt on the host holds, so that attempts
 * cannot read each other's files or signal each other's processes, nor the worker's. A uid is
 * claimed with a lock directory (atomic across the workers of a host) that names the sandbox
 * holding it; a lock whose sandbox is gone is stale and taken over. Releasing a uid first ends
 * every process still running as it, so that nothing an attempt left behind (a daemon that
 * left its process group) outlives it or meets the next holder.
 */
export class JobUsers {
  constructor(
    /** Ends every process of a uid: the runtime's, which starts no heavy process to do it. */
    private readonly endAll: (uid: number) => Promise<void>,
    private readonly first = DEFAULT_UID_RANGE.first,
    private readonly count = DEFAULT_UID_RANGE.count,
    private readonly locks = DEFAULT_UID_LOCKS,
  ) {
    if (first < JOB_IDS.first || count < 1 || first + count - 1 > JOB_IDS.last)
      throw new Error(`not a range of job uids: ${first}+${count}`);
  }

  #lock(uid: number): string {
    return join(this.locks, String(uid));
  }

  /** A uid for the attempt whose sandbox is `owner`, tried from a hash of its id on. */
  async claim(attemptId: string, owner: string): Promise<JobUser> {
    await mkdir(this.locks, { recursive: true, mode: 0o700 });
    const start = createHash('sha256').update(attemptId).digest().readUInt32BE(0) % this.count;
    for (let i = 0; i < Math.min(this.count, 10_000); i++) {
      const uid = this.first + ((start + i) % this.count);
      const lock = this.#lock(uid);
      try {
        await mkdir(lock, { mode: 0o700 });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        if (!(await this.#stale(lock))) continue;
        await this.endAll(uid);
      }
      await writeFile(join(lock, 'owner'), owner, { mode: 0o600 });
      return { uid, gid: uid };
    }
    throw new Error(`no free uid among ${this.count} from ${this.first}`);
  }

  async #stale(lock: string): Promise<boolean> {
    const owner = await readFile(join(lock, 'owner'), 'utf8').catch(() => null);
    return owner !== null && !existsSync(owner);
  }

  /** Keeps holding `user` for `owner` after a worker restart. */
  async adopt(user: JobUser, owner: string): Promise<void> {
    await mkdir(this.#lock(user.uid), { recursive: true, mode: 0o700 });
    await writeFile(join(this.#lock(user.uid), 'owner'), owner, { mode: 0o600 });
  }

  /**
   * Gives the uid back, ending every process of `user` first unless `ended` says they are gone
   * (an attempt that ran in a PID namespace of its own: the kernel ends what is left in it when
   * its first process ends).
   */
  async release(user: JobUser, ended = false): Promise<void> {
    if (!ended) await this.endAll(user.uid);
    await rm(this.#lock(user.uid), { recursive: true, force: true });
  }
}

/**
 * Releases `user`, where there is one: true once it is, false (and `onError` told why) when it
 * could not be, its processes perhaps still running. What they could still change is no tree for
 * root to walk (a directory swapped for a link sends a recursive removal elsewhere): a caller
 * given false keeps the sandbox, and with it the uid's claim, for a later start to sweep.
 */
export async function releaseUser(
  users: JobUsers | undefined,
  user: JobUser | undefined,
  onError: (err: unknown) => void,
  ended = false,
): Promise<boolean> {
  if (!users || !user) return true;
  try {
    await users.release(user, ended);
    return true;
  } catch (err) {
    onError(err);
    return false;
  }
}
