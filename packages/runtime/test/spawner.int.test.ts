import { existsSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { chown, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processAlive, processInfo, tempDir, waitFor } from '@trainyard/testkit';
import { launchScript, ProcessRuntime, SAFE_PATH, shellQuote, type RunSpec } from '../src/index.ts';
import {
  IGNORES_TERM,
  intOrQuitIgnored,
  PRINT_IGNORED,
  runSpecIn,
  savesOnTerm,
} from './run-spec.ts';
import { workerStarting } from './worker-process.ts';
import { SpawnError, Spawner } from '../src/spawner.ts';
import { NOT_JOB_IDS } from '../src/perl-spawner.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir();
});
afterAll(async () => dir.remove());

const runtime = new ProcessRuntime();
afterAll(() => runtime.close());

const spec = (command: string, over: Partial<RunSpec> = {}) => runSpecIn(dir.path, command, over);

/** A command that runs until `go` exists, then exits 9; and the file that lets it go. */
let gates = 0;
function gated(): { command: string; go: string } {
  const go = join(dir.path, `go-${++gates}`);
  return { command: `while [ ! -e ${shellQuote(go)} ]; do sleep 0.05; done; exit 9`, go };
}

/** The session `pid` belongs to, from /proc/PID/stat. */
function sessionOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]);
  } catch {
    return null;
  }
}

/**
 * Whether the spawner `pid` has read the end of its commands: it lets go of the pipe then (or,
 * wrongly, has gone).
 */
function doneReading(pid: number): boolean {
  try {
    return readlinkSync(`/proc/${pid}/fd/0`) === '/dev/null';
  } catch {
    return true;
  }
}

describe('the spawner', () => {
  it('starts each attempt as a session leader whose parent is the spawner itself, with no waiter between', async () => {
    const started = await Promise.all(
      [1, 2, 3].map(() => runtime.start(spec('sleep 300'), () => undefined)),
    );
    const sh = realpathSync('/bin/sh');
    const spawner = processInfo(started[0]!.pid!)!.parent;
    expect(readFileSync(`/proc/${spawner}/cmdline`, 'utf8').split('\0')[0]).toBe(
      'trainyard-spawner',
    );
    expect(processInfo(spawner)!.parent).toBe(process.pid);
    for (const run of started) {
      const pid = run.pid!;
      await waitFor('the attempt to run its script', () => readlinkSync(`/proc/${pid}/exe`) === sh);
      expect(sessionOf(pid)).toBe(pid);
      expect(processInfo(pid)).toMatchObject({ group: pid, parent: spawner });
    }
    await Promise.all(started.map((run) => run.kill(100)));
  });

  it('lets what it started run on once closed, and still records and reports how each ended', async () => {
    const own = new ProcessRuntime();
    const { command, go } = gated();
    const s = spec(command);
    const run = await own.start(s, () => undefined);
    const spawner = processInfo(run.pid!)!.parent;
    try {
      own.close();
      await waitFor('the spawner to read the end of its commands', () => doneReading(spawner));
      expect(processAlive(run.pid!)).toBe(true);
      expect(processAlive(spawner)).toBe(true);
    } finally {
      await writeFile(go, '');
    }
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 9 });
    expect(await readFile(s.exitFile, 'utf8')).toBe('status 9\n');
    await waitFor('the spawner to exit', () => !processAlive(spawner));
  });

  it('outlives a worker that dies: what it started runs on, and its status is still recorded', async () => {
    const { command, go } = gated();
    const s = spec(command);
    const { worker, pid } = await workerStarting(s).catch(async (err: unknown) => {
      await writeFile(go, '');
      throw err;
    });
    try {
      const spawner = processInfo(pid)!.parent;
      expect(processInfo(spawner)!.parent).toBe(worker.pid);
      worker.kill('SIGKILL');
      await waitFor('the worker to die', () => !processAlive(worker.pid!));
      await waitFor('the spawner to see its worker gone', () => doneReading(spawner));
      expect(processAlive(pid)).toBe(true);
      await writeFile(go, '');
      await waitFor('the status to be recorded', async () => {
        return (await readFile(s.exitFile, 'utf8').catch(() => '')) === 'status 9\n';
      });
      await waitFor('the spawner to exit', () => !processAlive(spawner));
    } finally {
      worker.kill('SIGKILL');
      await writeFile(go, '');
    }
  });

  it('records and reports what keeps an attempt from starting', async () => {
    const noWork = spec('true', { workDir: join(dir.path, 'missing') });
    const noLog = spec('true', { logFile: join(dir.path, 'missing', 'attempt.log') });
    for (const [s, message] of [
      [noWork, 'cannot enter the work directory'],
      [noLog, 'cannot open the log file'],
    ] as const) {
      const run = await runtime.start(s, () => undefined);
      expect(await run.exited).toEqual({ kind: 'launch-error', message });
      expect(await readFile(s.exitFile, 'utf8')).toBe(`launch-error ${message}\n`);
      await expect(readFile(s.pidFile)).rejects.toThrow();
    }
  });

  it('refuses to run an attempt as root, as a system account, or as an id the kernel would cut to one', async () => {
    const spawner = new Spawner({ PATH: SAFE_PATH });
    for (const user of [
      { uid: 0, gid: 0 },
      { uid: 2_999_999, gid: 0 },
      { uid: 0, gid: 2_999_999 },
      { uid: 999, gid: 999 },
      { uid: 4_294_967_295, gid: 2_999_999 },
      { uid: 2_999_999, gid: 4_294_967_295 },
      { uid: 4_294_967_296, gid: 4_294_967_296 },
      { uid: 4_294_968_296, gid: 4_294_968_296 },
    ]) {
      const s = spec('touch ran', { user });
      const run = await runtime.start(s, () => undefined);
      expect(await run.exited).toEqual({
        kind: 'launch-error',
        message: NOT_JOB_IDS,
      });
      // The spawner, as root, refuses them too, given a launch file that names them.
      await writeFile(s.launchFile, launchScript(s));
      const launched = spawner.launch(s.launchFile);
      await expect(launched.pid).rejects.toThrow(new SpawnError(NOT_JOB_IDS));
      expect(await launched.ended).toBeNull();
      expect(existsSync(join(s.workDir, 'ran'))).toBe(false);
    }
    spawner.close();
  });

  it('refuses to end the processes of a system account, or of an id the kernel would cut to one', async () => {
    for (const uid of [0, 999, 4_294_967_295, 4_294_967_296, 1.5])
      await expect(runtime.endUser(uid)).rejects.toThrow(
        new SpawnError(`refusing to end the processes of uid ${uid}`),
      );
  });

  it('fails a launch whose launch file it cannot read', async () => {
    const spawner = new Spawner({ PATH: SAFE_PATH });
    const launched = spawner.launch(join(dir.path, 'no-such.launch'));
    spawner.close();
    await expect(launched.pid).rejects.toThrow(new SpawnError('cannot read the launch file'));
    expect(await launched.ended).toBeNull();
  });
});

describe.runIf(process.getuid?.() === 0)('the spawner, as root', () => {
  const uid = 2_999_999;

  it('starts an attempt of a user of its own as a session leader, a child of the spawner, in a PID namespace of its own', async () => {
    const out: string[] = [];
    const s = spec('echo "uid=$(id -u) parent=$PPID"; sleep 300', { user: { uid, gid: uid } });
    const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
    const pid = run.pid!;
    await waitFor('the script to run', () => out.join('').includes(`uid=${uid} parent=1\n`));
    expect(sessionOf(pid)).toBe(pid);
    const spawner = processInfo(pid)!.parent;
    expect(readFileSync(`/proc/${spawner}/cmdline`, 'utf8').split('\0')[0]).toBe(
      'trainyard-spawner',
    );
    await runtime.endUser(uid);
    await run.exited;
    expect(await readFile(s.exitFile, 'utf8')).toMatch(/^status \d+\n$/);
    expect(processAlive(pid)).toBe(false);
  });

  it('runs an attempt of a user of its own with no other group, no capability, no new privilege, SIGINT and SIGQUIT at their default, and a /proc, /tmp, /dev/shm and System V IPC of its own', async () => {
    const own = await tempDir('trainyard-confined-', '/var/tmp');
    await chown(own.path, uid, uid);
    try {
      const report = [
        'echo "ids=$(id -u):$(id -g):$(id -G)"',
        "grep -E '^(Groups|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status",
        'echo "first=$(ls /proc | grep -E \'^[0-9]+$\' | sort -n | head -n 1)"',
        'awk \'{ i = 7; while ($i != "-") i++; print $5, $6, $(i + 1) }\' /proc/self/mountinfo',
        'touch /tmp/mine && echo "tmp=$(ls /tmp)"',
        'echo "ipc=$(readlink /proc/self/ns/ipc)"',
        'for fd in /proc/$$/fd/*; do echo "fd=$(readlink "$fd")"; done',
        PRINT_IGNORED,
      ].join('; ');
      const s = runSpecIn(own.path, report, { user: { uid, gid: uid } });
      const out: string[] = [];
      const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
      expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
      const lines = out.join('').split('\n');
      expect(lines).toContain(`ids=${uid}:${uid}:${uid}`);
      expect(lines.filter((line) => /^Groups:\s*$/.test(line))).toHaveLength(1);
      for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
        expect(lines).toContain(`${set}:\t0000000000000000`);
      expect(lines).toContain('NoNewPrivs:\t1');
      expect(intOrQuitIgnored(out.join(''))).toEqual([[]]);
      expect(lines).toContain('first=1');
      expect(lines).toContain('/proc rw,nosuid,nodev,noexec,relatime proc');
      expect(lines).toContain('/tmp rw,nosuid,nodev,relatime tmpfs');
      expect(lines).toContain('/dev/shm rw,nosuid,nodev,relatime tmpfs');
      expect(lines.filter((line) => line.startsWith('Use of') || line.includes('denied'))).toEqual(
        [],
      );
      expect(lines).toContain('tmp=mine');
      const ipc = lines.find((line) => line.startsWith('ipc='));
      expect(ipc).toMatch(/^ipc=ipc:\[\d+\]$/);
      expect(ipc).not.toBe(`ipc=${readlinkSync('/proc/self/ns/ipc')}`);
      expect(lines.filter((line) => line.startsWith('fd='))).not.toContain(`fd=${s.exitFile}`);
      expect(existsSync('/tmp/mine')).toBe(false);
    } finally {
      await own.remove();
    }
  });

  it('ends an attempt it cannot confine as a launch error, without running its script', async () => {
    const bare = join(dir.path, 'no-sys-admin');
    await mkdir(bare);
    const perl = join(bare, 'perl');
    await writeFile(
      perl,
      `#!/bin/sh\nexec setpriv --bounding-set=-sys_admin ${realpathSync('/usr/bin/perl')} "$@"\n`,
      { mode: 0o755 },
    );
    const weak = new ProcessRuntime({}, `${bare}:${SAFE_PATH}`);
    try {
      const s = spec('touch ran', { user: { uid, gid: uid } });
      const run = await weak.start(s, () => undefined);
      expect(await run.exited).toEqual({
        kind: 'launch-error',
        message: 'cannot confine the job (namespaces: Operation not permitted)',
      });
      expect(existsSync(join(s.workDir, 'ran'))).toBe(false);
      expect(await readFile(s.logFile, 'utf8')).toContain('trainyard: cannot confine the job');
    } finally {
      weak.close();
    }
  });

  it('passes a stop that came before the script of a user of its own set its trap on to it, once the trap is set', async () => {
    const own = await tempDir('trainyard-early-stop-', '/var/tmp');
    await chown(own.path, uid, uid);
    const spawner = new Spawner({ PATH: SAFE_PATH });
    let group = 0;
    try {
      const s = runSpecIn(own.path, 'true', { user: { uid, gid: uid } });
      const go = join(own.path, 'go');
      const script = [
        'echo waiting',
        `while [ ! -e ${shellQuote(go)} ]; do :; done`,
        "trap 'echo got-term; exit 7' TERM",
        'echo trapped',
        'while :; do sleep 0.05; done',
      ];
      await writeFile(s.scriptFile, `${script.join('\n')}\n`, { mode: 0o644 });
      await writeFile(s.launchFile, launchScript(s));
      const launched = spawner.launch(s.launchFile);
      group = await launched.pid;
      expect(group).toBeGreaterThan(1);
      await waitFor('the script to run', async () =>
        (await readFile(s.logFile, 'utf8')).includes('waiting\n'),
      );
      // The runtime stops such an attempt through its first process, the spawner's child.
      process.kill(group, 'SIGTERM');
      await delay(200);
      await writeFile(go, '');
      const ended = await Promise.race([launched.ended, delay(8_000).then(() => 'running')]);
      expect(ended).toBe(7);
      expect(await readFile(s.logFile, 'utf8')).toBe('waiting\ntrapped\ngot-term\n');
    } finally {
      if (group > 1 && processAlive(group)) process.kill(-group, 'SIGKILL');
      spawner.close();
      await own.remove();
    }
  });

  it('stops an attempt of a user of its own in its first milliseconds without waiting for the grace', async () => {
    for (let i = 0; i < 8; i++) {
      const run = await runtime.start(
        spec('sleep 30', { user: { uid, gid: uid } }),
        () => undefined,
      );
      await delay(i);
      const stopped = Date.now();
      await run.kill(5_000);
      expect(Date.now() - stopped).toBeLessThan(4_000);
    }
  });

  it('gives a program of a user of its own that saves its work on SIGTERM its grace, and kills what ignores it once the grace is out', async () => {
    const own = await tempDir('trainyard-saves-', '/var/tmp');
    await chown(own.path, uid, uid);
    try {
      const saved = join(own.path, 'saved');
      const out: string[] = [];
      // A process of the job in a session of its own hears the stop too, and ends at once.
      const command = `setsid sleep 100 & ${savesOnTerm(saved)}`;
      const s = runSpecIn(own.path, command, { user: { uid, gid: uid } });
      const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
      await waitFor('the program to start', () => out.join('').includes('ready\n'));
      let stopped = Date.now();
      await run.kill(5_000);
      expect(await readFile(saved, 'utf8')).toBe('saved\n');
      expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
      expect(Date.now() - stopped).toBeLessThan(4_000);

      // A PATH of the job's that holds no `sleep` does not change how the script waits.
      const deaf = runSpecIn(own.path, IGNORES_TERM, {
        user: { uid, gid: uid },
        env: { PATH: '/nonexistent' },
      });
      const told: string[] = [];
      const next = await runtime.start(deaf, (_s, c) => told.push(c.toString()));
      await waitFor('the program to start', () => /^\d+\n/.test(told.join('')));
      stopped = Date.now();
      await next.kill(1_000);
      expect(Date.now() - stopped).toBeGreaterThanOrEqual(900);
      expect(processAlive(next.pid!)).toBe(false);
      expect(await next.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
      expect(told.join('')).not.toContain('not found');
    } finally {
      await own.remove();
    }
  });

  it('kills what ignores the stop of a worker that died in its grace once that grace is out, though the script of a user of its own never ends first', async () => {
    const own = await tempDir('trainyard-inherited-', '/var/tmp');
    await chown(own.path, uid, uid);
    try {
      const deaf = runSpecIn(own.path, IGNORES_TERM, {
        user: { uid, gid: uid },
        stopFile: join(own.path, 'attempt.stop'),
      });
      const { worker, pid } = await workerStarting(deaf, 1_000);
      const stopped = Date.now();
      worker.kill('SIGKILL');
      await waitFor('the worker to die', () => !processAlive(worker.pid!));
      const attached = await runtime.attach(deaf, pid, 0, () => undefined);
      // The program would end by itself after 30 s: the grace's end must come well before.
      const ended = await Promise.race([
        attached!.exited,
        delay(5_000).then(() => 'still running'),
      ]);
      expect(ended).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
      expect(Date.now() - stopped).toBeGreaterThanOrEqual(700);
      expect(processAlive(pid)).toBe(false);
    } finally {
      await own.remove();
    }
  });

  it('stops an attempt of a user of its own: its command hears SIGTERM before the grace ends', async () => {
    const out: string[] = [];
    const s = spec("trap 'echo got-term; exit 143' TERM; echo ready; while :; do sleep 0.1; done", {
      user: { uid, gid: uid },
    });
    const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
    await waitFor('the command to start', () => out.join('').includes('ready\n'));
    const started = Date.now();
    await run.kill(10_000);
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(out.join('')).toContain('got-term\n');
  });
});
