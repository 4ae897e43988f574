import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processAlive, tempDir, waitFor } from '@trainyard/testkit';
import { MemoryCgroups, oomKills, ProcessRuntime, SAFE_PATH, type RunSpec } from '../src/index.ts';
import { runSpecIn } from './run-spec.ts';
import { workerStarting } from './worker-process.ts';

const MiB = 1024 ** 2;
const PARENT = '/sys/fs/cgroup/memory/trainyard';
/** Touches every page of `mb` MiB, so that the memory is really used. */
const allocate = (mb: number) => `python3 -c "b = b'x' * (${mb} << 20); print(len(b))"`;

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir('trainyard-cgroup-');
});
afterAll(async () => dir.remove());

let attempts = 0;
const spec = (command: string, over: Partial<RunSpec> = {}) =>
  runSpecIn(dir.path, command, { attemptId: `att_cg${process.pid}_${++attempts}`, ...over });

/** The cgroups left of an attempt. */
const leftOf = (s: RunSpec) => {
  try {
    return readdirSync(PARENT).filter((n) => n.startsWith(`${s.attemptId}-`));
  } catch {
    return [];
  }
};

describe('oom kills as a cgroup counts them', () => {
  it('reads the count of v1’s memory.oom_control and v2’s memory.events', () => {
    expect(oomKills('oom_kill_disable 0\nunder_oom 0\noom_kill 2\n')).toBe(2);
    expect(oomKills('low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n')).toBe(1);
    expect(oomKills('oom_kill_disable 0\nunder_oom 0\n')).toBe(0);
  });
});

describe.runIf(process.getuid?.() === 0)('memory cgroups of the process runtime, as root', () => {
  const cgroups = MemoryCgroups.here();
  const runtime = new ProcessRuntime(process.env, SAFE_PATH, cgroups);
  afterAll(() => runtime.close());
  const user = { uid: 2_999_997, gid: 2_999_997 };

  it('finds this host’s memory cgroups, which the runtime holds limits in', () => {
    expect(cgroups).not.toBeNull();
    expect(runtime.limitsMemory).toBe(true);
  });

  it('ends an attempt that outgrows its memory as out of memory, and removes its cgroup', async () => {
    const s = spec(allocate(512), { user, memoryBytes: 64 * MiB });
    const run = await runtime.start(s, () => undefined);
    expect(await run.exited).toEqual({ kind: 'oom' });
    expect(leftOf(s)).toEqual([]);
  });

  it('holds the limit for an attempt of the worker’s own user too', async () => {
    const s = spec(allocate(512), { memoryBytes: 64 * MiB });
    const run = await runtime.start(s, () => undefined);
    expect(await run.exited).toEqual({ kind: 'oom' });
  });

  it('lets an attempt within its limit run, and keeps other failures what they are', async () => {
    const out: string[] = [];
    const fits = await runtime.start(
      spec(allocate(16), { user, memoryBytes: 256 * MiB }),
      (_s, c) => out.push(c.toString()),
    );
    expect(await fits.exited).toEqual({ kind: 'exited', exitCode: 0 });
    expect(out.join('')).toContain(String(16 * MiB));
    const fails = await runtime.start(
      spec('exit 3', { user, memoryBytes: 256 * MiB }),
      () => undefined,
    );
    expect(await fails.exited).toEqual({ kind: 'exited', exitCode: 3 });
  });

  it('kills what an attempt left running outside its process group as it ends', async () => {
    const out: string[] = [];
    const s = spec('setsid sleep 300 & echo "stray=$!"', { memoryBytes: 256 * MiB });
    const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
    const stray = Number(/stray=(\d+)/.exec(out.join(''))?.[1]);
    expect(stray).toBeGreaterThan(1);
    await waitFor('the stray process to be gone', () => !processAlive(stray), { timeoutMs: 5_000 });
    expect(leftOf(s)).toEqual([]);
  });

  it('sweeps the empty cgroups left of attempts no runtime saw end, not one that holds a process', async () => {
    const left = spec('true');
    cgroups!.prepare(left.attemptId, left.pidFile);
    expect(leftOf(left)).toHaveLength(1);
    const out: string[] = [];
    const live = spec('echo up; sleep 300', { user });
    const run = await runtime.start(live, (_s, c) => out.push(c.toString()));
    await waitFor('the attempt to run', () => out.join('').includes('up'));
    expect(cgroups!.sweep(60_000)).toBe(0);
    expect(leftOf(left)).toHaveLength(1);
    // Old enough to be left, young enough that no other attempt being prepared now is taken.
    await new Promise((r) => setTimeout(r, 1_200));
    expect(cgroups!.sweep(1_000)).toBeGreaterThanOrEqual(1);
    expect(leftOf(left)).toEqual([]);
    expect(leftOf(live)).toHaveLength(1);
    await run.kill(1_000);
    await run.exited;
    expect(leftOf(live)).toEqual([]);
  });

  it('reads the end of an attempt it took over from a worker that died as out of memory', async () => {
    const s = spec(`sleep 2; ${allocate(512)}`, { user, memoryBytes: 64 * MiB });
    const { worker, pid } = await workerStarting(s);
    try {
      worker.kill('SIGKILL');
      await waitFor('the worker to die', () => !processAlive(worker.pid!));
      const attached = await runtime.attach(s, pid, 0, () => undefined);
      expect(attached).not.toBeNull();
      expect(await attached!.exited).toEqual({ kind: 'oom' });
      expect(leftOf(s)).toEqual([]);
    } finally {
      worker.kill('SIGKILL');
    }
  });
});
