/**
 * A memory cgroup of its own for each attempt the process runtime starts, where the host lets the
 * worker make one (it runs as root, cgroup v1's memory hierarchy or v2 with the memory
 * controller): the attempt's memory limit is held there, swap included, and the kernel counts
 * there the processes it killed for memory, which is how an attempt's end reads as
 * out-of-memory. Whatever is left in the cgroup when the attempt ends is killed with it.
 */
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** The files of one cgroup version that the runtime uses. */
interface Layout {
  /** Where Trainyard's cgroups are made. */
  parent: string;
  limit: string;
  /** The limit of memory and swap together (v1), or of swap alone (v2); absent without swap. */
  swap: { file: string; value: (limit: string) => string } | null;
  /** Where the kernel counts the processes it killed for memory (`oom_kill N`). */
  events: string;
}

const PARENT = 'trainyard';
const REMOVE_TRIES = 20;
/**
 * An empty cgroup this old is left of an attempt whose end no runtime saw (its worker was
 * killed): a live attempt's never is empty, and one being prepared is joined within moments.
 */
const LEFT_AFTER_MS = 60_000;

/** The first `oom_kill N` line's N, of a cgroup's events file; 0 where it has none. */
export function oomKills(text: string): number {
  const match = /^oom_kill (\d+)$/m.exec(text);
  return match ? Number(match[1]) : 0;
}

export class MemoryCgroups {
  private constructor(private readonly layout: Layout) {}

  /**
   * The memory cgroups of this host under `root`, or null where the worker cannot make them (it
   * is not root, or the host has no memory controller it may use).
   */
  static here(root = '/sys/fs/cgroup'): MemoryCgroups | null {
    const found = MemoryCgroups.#find(root);
    found?.sweep();
    return found;
  }

  static #find(root: string): MemoryCgroups | null {
    if (process.getuid?.() !== 0) return null;
    try {
      const v1 = join(root, 'memory');
      if (existsSync(join(v1, 'memory.limit_in_bytes'))) {
        const parent = join(v1, PARENT);
        mkdirSync(parent, { recursive: true });
        const memsw = existsSync(join(parent, 'memory.memsw.limit_in_bytes'));
        return new MemoryCgroups({
          parent,
          limit: 'memory.limit_in_bytes',
          swap: memsw ? { file: 'memory.memsw.limit_in_bytes', value: (limit) => limit } : null,
          events: 'memory.oom_control',
        });
      }
      const controllers = readFileSync(join(root, 'cgroup.controllers'), 'utf8');
      if (!controllers.split(/\s+/).includes('memory')) return null;
      const parent = join(root, PARENT);
      writeFileSync(join(root, 'cgroup.subtree_control'), '+memory');
      mkdirSync(parent, { recursive: true });
      writeFileSync(join(parent, 'cgroup.subtree_control'), '+memory');
      return new MemoryCgroups({
        parent,
        limit: 'memory.max',
        swap: { file: 'memory.swap.max', value: () => '0' },
        events: 'memory.events',
      });
    } catch {
      return null;
    }
  }

  /** The cgroup of the attempt whose process group is recorded in `pidFile`. */
  #dir(attemptId: string, pidFile: string): string {
    const tag = createHash('sha256').update(pidFile).digest('hex').slice(0, 16);
    return join(
      this.layout.parent,
      `${attemptId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64)}-${tag}`,
    );
  }

  /**
   * Makes the attempt's cgroup, with its limit where it has one; the file the spawner writes
   * the attempt's first process to, so that all it starts is in there.
   */
  prepare(attemptId: string, pidFile: string, memoryBytes?: number): string {
    const dir = this.#dir(attemptId, pidFile);
    mkdirSync(dir, { recursive: true });
    if (memoryBytes) {
      const limit = String(Math.floor(memoryBytes));
      writeFileSync(join(dir, this.layout.limit), limit);
      const swap = this.layout.swap;
      if (swap && existsSync(join(dir, swap.file)))
        writeFileSync(join(dir, swap.file), swap.value(limit));
    }
    return join(dir, 'cgroup.procs');
  }

  /**
   * Whether the kernel killed a process of the attempt for memory; then kills what is left in
   * its cgroup and removes it. False where it has no cgroup.
   */
  async finish(attemptId: string, pidFile: string): Promise<boolean> {
    const dir = this.#dir(attemptId, pidFile);
    let killed: boolean;
    try {
      killed = oomKills(readFileSync(join(dir, this.layout.events), 'utf8')) > 0;
    } catch {
      return false;
    }
    for (let tries = 0; tries < REMOVE_TRIES; tries++) {
      try {
        rmdirSync(dir);
        break;
      } catch {
        for (const pid of this.#members(dir)) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // It ended meanwhile.
          }
        }
        await sleep(50);
      }
    }
    return killed;
  }

  /**
   * Removes the empty cgroups left of attempts whose end no runtime saw, made over `olderThanMs`
   * ago; says how many. One that still holds a process is not empty, and stays.
   */
  sweep(olderThanMs = LEFT_AFTER_MS): number {
    let removed = 0;
    let names: string[];
    try {
      names = readdirSync(this.layout.parent);
    } catch {
      return 0;
    }
    for (const name of names) {
      const dir = join(this.layout.parent, name);
      try {
        if (Date.now() - statSync(dir).ctimeMs < olderThanMs) continue;
        if (this.#members(dir).length > 0) continue;
        rmdirSync(dir);
        removed++;
      } catch {
        // Not a cgroup, gone meanwhile, or busy: left as it is.
      }
    }
    return removed;
  }

  #members(dir: string): number[] {
    try {
      return readFileSync(join(dir, 'cgroup.procs'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number)
        .filter((pid) => pid > 1);
    } catch {
      return [];
    }
  }
}
