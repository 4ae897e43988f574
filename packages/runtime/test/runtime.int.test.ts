import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readlinkSync, realpathSync, writeFileSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  pidsMatching,
  processAlive as alive,
  processInfo,
  tempDir,
  waitFor,
} from '@trainyard/testkit';
import {
  NvidiaSmiInventory,
  ProcessRuntime,
  recordedPid,
  SAFE_PATH,
  SimulatedInventory,
  type RunSpec,
} from '../src/index.ts';
import {
  IGNORES_TERM,
  IGNORES_TERM_ALONE,
  intOrQuitIgnored,
  PRINT_IGNORED,
  runSpecIn,
  savesOnTerm,
} from './run-spec.ts';
import { stopInWorkerAsInit, workerStarting } from './worker-process.ts';

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir();
});
afterAll(async () => dir.remove());

const runtime = new ProcessRuntime();
afterAll(() => runtime.close());

const spec = (command: string, over: Partial<RunSpec> = {}) =>
  runSpecIn(dir.path, command, { env: { GREETING: 'hi' }, gpus: [0, 2], ...over });

describe('process runtime', () => {
  it('keeps no more of a log than its limit, though the job makes it huge without writing it, and says so once', async () => {
    const limited = new ProcessRuntime(process.env, SAFE_PATH, null, 1024 ** 2);
    try {
      const s = spec(`echo start; perl -e 'truncate(STDOUT, 1 << 40) or die "truncate: $!"'`);
      const out: Buffer[] = [];
      const run = await limited.start(s, (_s, c) => out.push(c));
      expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
      const text = Buffer.concat(out).toString('latin1');
      const note =
        '\n[trainyard] the log reached its limit of 1 MiB: ' +
        'what the job wrote after that is not kept\n';
      expect(text.startsWith('start\n')).toBe(true);
      expect(text.endsWith(note)).toBe(true);
      expect(text.length).toBe(1024 ** 2 + note.length);
      const again: Buffer[] = [];
      const attached = await limited.attach(s, run.pid!, text.length, (_s, c) => again.push(c));
      expect(await attached!.exited).toEqual({ kind: 'exited', exitCode: 0 });
      expect(Buffer.concat(again).length, 'what a restarted worker reads on').toBe(0);
    } finally {
      limited.close();
    }
  });

  it('runs the setup and command in the sandbox with the job environment, SIGINT and SIGQUIT at their default, and captures output', async () => {
    const out: string[] = [];
    const s = spec(
      `echo "$GREETING $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $TRAINYARD_JOB_ID $TRAINYARD_OUTPUT_DIR $(pwd)"; echo "args=$#"; ${PRINT_IGNORED}; echo oops >&2; exit 3`,
      {
        // A variable of the script's own in the job's environment changes nothing.
        env: { GREETING: 'hi', CUDA_DEVICE_ORDER: 'FASTEST_FIRST', __ty_stopped: '1' },
        setup: PRINT_IGNORED,
      },
    );
    const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 3 });
    expect(await readFile(s.pidFile, 'utf8')).toBe(`${run.pid}\n`);
    const text = out.join('');
    expect(text).toContain(`hi 0,2 PCI_BUS_ID job_1 ${join(dir.path, 'out')} ${dir.path}`);
    expect(text).toContain('args=0\n');
    expect(text).toContain('oops');
    expect(intOrQuitIgnored(text)).toEqual([[], []]);
  });

  it('hands over a flood of output whole and in order, however fast it is written', async () => {
    const chunks: Buffer[] = [];
    const run = await runtime.start(spec('seq 1 2000000'), (_s, c) => chunks.push(c));
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
    const lines = Buffer.concat(chunks).toString().split('\n');
    expect(lines).toHaveLength(2_000_001);
    expect(lines.every((l, i) => i === 2_000_000 || l === String(i + 1))).toBe(true);
  });

  it('kills the whole process group, children included', async () => {
    const out: string[] = [];
    const run = await runtime.start(spec('sleep 300 & echo child=$!; wait'), (_s, c) =>
      out.push(c.toString()),
    );
    const childPid = await new Promise<number>((resolve) => {
      const timer = setInterval(() => {
        const m = /child=(\d+)/.exec(out.join(''));
        if (m) {
          clearInterval(timer);
          resolve(Number(m[1]));
        }
      }, 10);
    });
    expect(alive(childPid)).toBe(true);
    await run.kill(1_000);
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    await waitFor('the child to die', () => !alive(childPid), { timeoutMs: 2_000 });
  });

  it('stops the command of an attempt whose stop came before the command started', async () => {
    const out: string[] = [];
    // A setup deaf to SIGTERM: the stop comes while it runs, and before the command is started.
    const s = spec('sleep 3; echo finished', {
      setup: "trap '' TERM; echo setup-started; sleep 1",
    });
    const run = await runtime.start(s, (_s, c) => out.push(c.toString()));
    await waitFor('the setup to run', () => out.join('').includes('setup-started\n'));
    const stopped = Date.now();
    await run.kill(10_000);
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    expect(Date.now() - stopped).toBeLessThan(2_900);
    expect(out.join('')).not.toContain('finished');
  });

  it('gives a program that saves its work on SIGTERM its grace, though the shell above it ends at once', async () => {
    const saved = join(dir.path, 'saved-started');
    const out: string[] = [];
    const run = await runtime.start(spec(savesOnTerm(saved)), (_s, c) => out.push(c.toString()));
    await waitFor('the program to start', () => out.join('').includes('ready\n'));
    const stopped = Date.now();
    await run.kill(5_000);
    expect(await readFile(saved, 'utf8')).toBe('saved\n');
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    expect(Date.now() - stopped).toBeLessThan(4_000);
  });

  it('kills what is left of a stopped attempt once its grace is out', async () => {
    const out: string[] = [];
    const run = await runtime.start(spec(IGNORES_TERM), (_s, c) => out.push(c.toString()));
    await waitFor('the program to start', () => /^\d+\n/.test(out.join('')));
    const program = Number(out.join('').trim());
    const stopped = Date.now();
    await run.kill(1_000);
    expect(Date.now() - stopped).toBeGreaterThanOrEqual(900);
    await waitFor('the program to die', () => !alive(program), { timeoutMs: 2_000 });
  });

  it('reports a command that cannot start as a launch error', async () => {
    const run = await runtime.start(
      spec('true', { workDir: join(dir.path, 'missing') }),
      () => undefined,
    );
    expect((await run.exited).kind).toBe('launch-error');
  });
});

/** The spawners this process started (the test's own children running the spawner). */
function spawners(): number[] {
  return pidsMatching('trainyard-spawner').filter(
    (pid) => processInfo(pid)?.parent === process.pid,
  );
}

describe('process runtime, starting through its spawner', () => {
  it('starts many attempts at once, each in its own session, with its own environment and exit', async () => {
    const tricky = `it's "quoted" $HOME \\ and\na second line`;
    const outs = new Map<number, string[]>();
    const runs = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        outs.set(i, []);
        const s = spec('printf "%s|%s" "$N" "$TRICKY"; exit "$N"', {
          env: { N: String(i), TRICKY: tricky },
        });
        const run = await runtime.start(s, (_s, c) => outs.get(i)!.push(c.toString()));
        return { i, s, run, exit: await run.exited };
      }),
    );
    for (const { i, s, run, exit } of runs) {
      expect(exit).toEqual({ kind: 'exited', exitCode: i });
      expect(outs.get(i)!.join('')).toBe(`${i}|${tricky}`);
      expect(await recordedPid(s.pidFile)).toBe(run.pid);
    }
  });

  it("leaves the attempt none of the spawner's pipes", async () => {
    const s = spec('sleep 300');
    const run = await startedRun(s);
    const spawner = processInfo(run.pid!)!.parent;
    const sh = realpathSync('/bin/sh');
    await waitFor(
      'the attempt to run its script',
      () => readlinkSync(`/proc/${run.pid}/exe`) === sh,
    );
    // A descriptor the shell closes between the listing and its reading is left out.
    const fds = (pid: number) =>
      readdirSync(`/proc/${pid}/fd`).flatMap((fd) => {
        try {
          return [readlinkSync(`/proc/${pid}/fd/${fd}`)];
        } catch {
          return [];
        }
      });
    const spawnerPipes = [0, 1].map((fd) => readlinkSync(`/proc/${spawner}/fd/${fd}`));
    expect(spawnerPipes.every((target) => /^(pipe|socket):/.test(target))).toBe(true);
    const attempt = fds(run.pid!);
    expect(attempt).toContain(s.logFile);
    expect(attempt.filter((target) => spawnerPipes.includes(target))).toEqual([]);
    await run.kill(100);
  });

  it('reports a command killed from outside by its signal', async () => {
    const s = spec('sleep 300');
    const run = await startedRun(s);
    process.kill(-run.pid!, 'SIGKILL');
    expect(await run.exited).toEqual({ kind: 'signalled', signal: 'SIGKILL' });
  });

  it('says why nothing can start on a host without perl', async () => {
    const bare = new ProcessRuntime({}, join(dir.path, 'no-such-bin'));
    const run = await bare.start(spec('true'), () => undefined);
    expect(await run.exited).toEqual({
      kind: 'launch-error',
      message: 'perl (perl-base) is not installed',
    });
  });

  it('hears the end of what a killed spawner started, and starts the next attempt with a new one', async () => {
    const s = spec('sleep 0.5; exit 5');
    const run = await startedRun(s);
    const spawner = processInfo(run.pid!)!.parent;
    expect(spawners()).toContain(spawner);
    process.kill(spawner, 'SIGKILL');
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 5 });
    const next = await runtime.start(spec('exit 6'), () => undefined);
    expect(await next.exited).toEqual({ kind: 'exited', exitCode: 6 });
    expect(spawners()).not.toContain(spawner);
  });
});

describe('GPU inventory', () => {
  it('reads GPUs from nvidia-smi (a fake one on PATH here)', async () => {
    const fake = join(dir.path, 'fake-nvidia-smi');
    await mkdir(dir.path, { recursive: true });
    await writeFile(
      fake,
      '#!/bin/sh\necho "0, NVIDIA H100 80GB HBM3, GPU-aaa, 81559, 1024, 7"\necho "1, NVIDIA H100 80GB HBM3, GPU-bbb, 81559, 0, 0"\n',
    );
    await chmod(fake, 0o755);
    const inv = new NvidiaSmiInventory(fake);
    expect(await inv.list()).toEqual([
      {
        index: 0,
        name: 'NVIDIA H100 80GB HBM3',
        uuid: 'GPU-aaa',
        vramBytes: 81559 * 1024 ** 2,
        simulated: false,
      },
      {
        index: 1,
        name: 'NVIDIA H100 80GB HBM3',
        uuid: 'GPU-bbb',
        vramBytes: 81559 * 1024 ** 2,
        simulated: false,
      },
    ]);
    expect(await inv.read()).toEqual([
      { index: 0, usedBytes: 1024 * 1024 ** 2, utilPct: 7 },
      { index: 1, usedBytes: 0, utilPct: 0 },
    ]);
    expect(await new NvidiaSmiInventory(join(dir.path, 'absent')).available()).toBe(false);
  });

  it('simulates GPUs by shape, marked as simulated', async () => {
    const gpus = await SimulatedInventory.parse('2x24GiB').list();
    expect(gpus).toHaveLength(2);
    expect(gpus.every((g) => g.simulated && g.vramBytes === 24 * 1024 ** 3)).toBe(true);
    expect(() => SimulatedInventory.parse('lots')).toThrow(/2x24GiB/);
  });
});

describe('simulated runtime', () => {
  it('runs nothing: an attempt exits 0 after its time, or is killed', async () => {
    const { SimulatedRuntime } = await import('../src/index.ts');
    const quick = await new SimulatedRuntime(5).start(spec('python train.py'), () => undefined);
    expect(quick.pid).toBeUndefined();
    expect(await quick.exited).toEqual({ kind: 'exited', exitCode: 0 });
    const slow = await new SimulatedRuntime(60_000).start(spec('python train.py'), () => undefined);
    await slow.kill();
    expect(await slow.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
  });
});

/** Starts `s` and waits until its group is recorded and set up, as a restarted worker finds it. */
async function startedRun(s: RunSpec) {
  const run = await runtime.start(s, () => undefined);
  await waitFor('the group to be recorded and set up', async () => {
    const pid = await recordedPid(s.pidFile);
    return pid !== null && processInfo(pid)?.group === pid;
  });
  return run;
}

describe('process runtime, and the PATH of the host', () => {
  it('starts nothing through a directory on the worker’s PATH that others can write', async () => {
    const planted = join(dir.path, 'writable-bin');
    await mkdir(planted, { recursive: true, mode: 0o777 });
    const marker = join(dir.path, 'planted-ran');
    for (const tool of ['perl', 'sh', 'setpriv', 'unshare', 'env']) {
      await writeFile(join(planted, tool), `#!/bin/sh\ntouch ${marker}\nexit 1\n`);
      await chmod(join(planted, tool), 0o755);
    }
    const hijacked = new ProcessRuntime({ PATH: `${planted}:${process.env.PATH}` });
    const out: string[] = [];
    const run = await hijacked.start(spec('echo "path=$PATH"'), (_s, c) => out.push(c.toString()));
    expect(await run.exited).toEqual({ kind: 'exited', exitCode: 0 });
    hijacked.close();
    expect(out.join('')).toContain(
      'path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    );
    await expect(readFile(marker)).rejects.toThrow();
  });
});

describe('process runtime, attaching to what an earlier worker started', () => {
  it('hears how a command ended from its spawner, which outlives the worker that started it', async () => {
    const s = spec('sleep 300');
    const run = await startedRun(s);
    const attached = await new ProcessRuntime().attach(s, run.pid!, 0, () => undefined);
    process.kill(-run.pid!, 'SIGKILL');
    expect(await attached!.exited).toEqual({ kind: 'signalled', signal: 'SIGKILL' });
  });

  it('reads the output on from an offset and gets the exit code the command recorded', async () => {
    const s = spec('for i in 1 2 3 4 5; do echo "line $i"; sleep 0.1; done; exit 4');
    const first: string[] = [];
    const run = await runtime.start(s, (_s, c) => first.push(c.toString()));
    await waitFor('the first line', () => first.join('').includes('line 1\n'));
    const offset = 'line 1\n'.length;
    const rest: string[] = [];
    const attached = await new ProcessRuntime().attach(s, run.pid!, offset, (_s, c) =>
      rest.push(c.toString()),
    );
    expect(attached?.pid).toBe(run.pid);
    expect(await attached!.exited).toEqual({ kind: 'exited', exitCode: 4 });
    expect(rest.join('')).toBe('line 2\nline 3\nline 4\nline 5\n');
  });

  it('reports a command killed while no worker or spawner watched as lost, and a gone one as nothing', async () => {
    const s = spec('sleep 300');
    const run = await startedRun(s);
    process.kill(processInfo(run.pid!)!.parent, 'SIGKILL');
    const attached = await new ProcessRuntime().attach(s, run.pid!, 0, () => undefined);
    process.kill(-run.pid!, 'SIGKILL');
    expect((await attached!.exited).kind).toBe('lost');
    expect(await new ProcessRuntime().attach(s, run.pid!, 0, () => undefined)).toBeNull();
  });

  it('stops an attached command with its whole process group', async () => {
    const s = spec('sleep 300 & wait');
    const run = await startedRun(s);
    const attached = await new ProcessRuntime().attach(s, run.pid!, 0, () => undefined);
    await attached!.kill(500);
    expect(alive(run.pid!)).toBe(false);
  });

  it('gives a program under an attached attempt its grace to save its work on SIGTERM', async () => {
    const saved = join(dir.path, 'saved-attached');
    const s = spec(savesOnTerm(saved));
    const { worker, pid } = await workerStarting(s);
    worker.kill('SIGKILL');
    await waitFor('the worker to die', () => !alive(worker.pid!));
    await waitFor('the program to start', async () =>
      (await readFile(s.logFile, 'utf8')).includes('ready\n'),
    );
    const attached = await runtime.attach(s, pid, 0, () => undefined);
    await attached!.kill(5_000);
    expect(await readFile(saved, 'utf8')).toBe('saved\n');
    expect(await attached!.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
  });

  it('keeps the grace of a stop that a worker began before it died: a saver saves, an ignorer lives on until the grace is out', async () => {
    const saved = join(dir.path, 'saved-across-restart');
    const saver = spec(savesOnTerm(saved, 1.5), { stopFile: join(dir.path, 'saver.stop') });
    const first = await workerStarting(saver, 10_000);
    first.worker.kill('SIGKILL');
    await waitFor('the worker to die', () => !alive(first.worker.pid!));
    const attached = await runtime.attach(saver, first.pid, 0, () => undefined);
    expect(await attached!.exited).toEqual({ kind: 'signalled', signal: 'SIGTERM' });
    expect(await readFile(saved, 'utf8')).toBe('saved\n');

    // The script waits for this one, so no end is recorded while it runs.
    const ignorer = spec(IGNORES_TERM_ALONE, { stopFile: join(dir.path, 'ignorer.stop') });
    const second = await workerStarting(ignorer, 1_500);
    const stopped = Date.now();
    second.worker.kill('SIGKILL');
    await waitFor('the worker to die', () => !alive(second.worker.pid!));
    const program = Number((await readFile(ignorer.logFile, 'utf8')).split('\n')[0]);
    const inherited = await runtime.attach(ignorer, second.pid, 0, () => undefined);
    await delay(300);
    expect(alive(program)).toBe(true);
    // The program would end by itself after 30 s: the grace's end must come well before.
    const ended = await Promise.race([inherited!.exited, delay(5_000).then(() => 'still running')]);
    expect(ended).toEqual({ kind: 'signalled', signal: 'SIGKILL' });
    expect(Date.now() - stopped).toBeGreaterThanOrEqual(1_200);
    expect(alive(program)).toBe(false);
  });

  it.runIf(process.getuid?.() === 0)(
    'signals nothing once an attempt has ended, though its pid is another process’s by then',
    async () => {
      // A log of 512 MiB, made without writing it, holds the attempt's end a while after that.
      const s = spec(`perl -e 'truncate(STDOUT, 512 << 20) or die "truncate: $!"'`);
      const run = await runtime.start(s, () => undefined);
      const pid = run.pid!;
      await waitFor('the attempt’s processes to be gone', () => !alive(pid));
      await waitFor('its end recorded', () => existsSync(s.exitFile));
      await delay(300);
      writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
      const other = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
      try {
        expect(other.pid, 'a process started at the attempt’s pid').toBe(pid);
        await run.kill(50);
        await delay(200);
        expect(alive(pid)).toBe(true);
      } finally {
        other.kill('SIGKILL');
      }
    },
  );

  it.runIf(process.getuid?.() === 0)(
    'ends a stop once the program under the script has saved, though the worker is PID 1 and leaves its zombie unreaped',
    async () => {
      const saved = join(dir.path, 'saved-under-init');
      const took = await stopInWorkerAsInit(spec(savesOnTerm(saved)), 8_000);
      expect(await readFile(saved, 'utf8')).toBe('saved\n');
      expect(took).toBeLessThan(4_000);
    },
  );

  it('stops an attached attempt of a user of its own whose first process ignores SIGTERM (an earlier spawner) through its process group', async () => {
    const heard = join(dir.path, 'heard');
    // A first process deaf to SIGTERM, and under it a program that saves on it.
    const leader = spawn(
      'perl',
      [
        '-e',
        [
          '$SIG{TERM} = "IGNORE";',
          'my $pid = fork;',
          'if (!$pid) {',
          '  $SIG{TERM} = sub { open my $f, ">", $ARGV[0]; exit 0 };',
          '  open my $r, ">", "$ARGV[0].ready"; close $r; sleep 30; exit 1',
          '}',
          'waitpid $pid, 0;',
        ].join(' '),
        heard,
      ],
      { detached: true, stdio: 'ignore' },
    );
    try {
      await waitFor('the program to start', () => existsSync(`${heard}.ready`));
      const s = spec('true', { user: { uid: 2_999_999, gid: 2_999_999 } });
      const attached = await runtime.attach(s, leader.pid!, 0, () => undefined);
      const stopped = Date.now();
      await attached!.kill(5_000);
      expect(Date.now() - stopped).toBeLessThan(4_000);
      expect(existsSync(heard)).toBe(true);
    } finally {
      if (alive(leader.pid!)) process.kill(-leader.pid!, 'SIGKILL');
    }
  });
});
