import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { readProbeReport } from '../src/index.ts';

/**
 * The probe wrapper (packages/runtime/probe/sitecustomize.py) run for real: the system's Python
 * with PyTorch (scripts/setup.sh --torch, as scripts/test.sh installs it) runs small training
 * scripts with the probe first on PYTHONPATH, and the tests read the report it leaves.
 */

const PROBE = fileURLToPath(new URL('../probe', import.meta.url));
const PYTHON = '/usr/bin/python3';

interface Report {
  python: boolean;
  steps: number;
  done: boolean;
  reason: 'maxSteps' | 'plateau' | null;
  device: 'cpu' | 'cuda';
  peakVramBytes: number | null;
  peakRssBytes: number;
  stepMs: number | null;
  pid: number;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The directory the script ran in; the report is `report.json` there. */
  cwd: string;
  report: string;
}

let dir: Awaited<ReturnType<typeof tempDir>>;
beforeAll(async () => {
  dir = await tempDir('trainyard-probe-');
});
afterAll(async () => dir.remove());

/** What every script that trains starts with: one thread, a fixed seed, a tiny MLP and its data. */
const MLP = `
import os, sys
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
x = torch.randn(64, 32)
y = torch.randn(64, 1)

def loss():
    return torch.nn.functional.mse_loss(model(x), y)

def mark(i):
    with open("steps.txt", "a") as f:
        f.write(f"{i}\\n")
`;

let runs = 0;
/**
 * Runs `script` with the probe on PYTHONPATH in a directory of its own; `probe: false` leaves
 * TRAINYARD_PROBE_REPORT unset.
 */
async function run(
  script: string,
  opts: { env?: Record<string, string>; probe?: boolean; pythonPath?: string } = {},
): Promise<Run> {
  const cwd = join(dir.path, `run-${++runs}`);
  await mkdir(cwd);
  await writeFile(join(cwd, 'script.py'), script);
  const report = join(cwd, 'report.json');
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: cwd,
    PYTHONPATH: opts.pythonPath ?? PROBE,
    // No __pycache__ next to the probe in the repository.
    PYTHONDONTWRITEBYTECODE: '1',
    ...(opts.probe === false ? {} : { TRAINYARD_PROBE_REPORT: report }),
    ...opts.env,
  };
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, ['script.py'], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, cwd, report });
    });
  });
}

/** The report `r` left, checked to hold every field with its type. */
async function reportOf(r: Run): Promise<Report> {
  expect(existsSync(r.report), `no report; stderr:\n${r.stderr}`).toBe(true);
  const report = JSON.parse(await readFile(r.report, 'utf8')) as Report;
  expect(Object.keys(report).sort()).toEqual(
    [
      'device',
      'done',
      'peakRssBytes',
      'peakVramBytes',
      'pid',
      'python',
      'reason',
      'stepMs',
      'steps',
    ].sort(),
  );
  expect(report.python).toBe(true);
  expect(Number.isInteger(report.steps)).toBe(true);
  expect(typeof report.done).toBe('boolean');
  expect(['cpu', 'cuda']).toContain(report.device);
  expect(Number.isInteger(report.peakRssBytes)).toBe(true);
  expect(Number.isInteger(report.pid) && report.pid > 0).toBe(true);
  return report;
}

async function linesOf(r: Run, file: string): Promise<string[]> {
  const path = join(r.cwd, file);
  if (!existsSync(path)) return [];
  return (await readFile(path, 'utf8')).split('\n').filter(Boolean);
}

describe('the probe wrapper', { timeout: 60_000 }, () => {
  it('stops a training loop whose memory stops growing at the plateau, with its figures', async () => {
    const r = await run(`${MLP}
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(200):
    optimizer.zero_grad()
    loss().backward()
    optimizer.step()
    mark(i)
open("finished", "w").close()
`);
    expect(r.code, r.stderr).toBe(0);
    const report = await reportOf(r);
    expect(report).toMatchObject({ done: true, reason: 'plateau', device: 'cpu' });
    expect(report.peakVramBytes).toBeNull();
    expect(report.steps).toBeGreaterThanOrEqual(3);
    expect(report.steps).toBeLessThanOrEqual(19);
    expect(report.peakRssBytes).toBeGreaterThan(10 * 1024 * 1024);
    expect(report.stepMs).toBeGreaterThan(0);
    expect(report.pid).not.toBe(process.pid);
    // The process ends inside the step that decides: the script never marks that one, nor
    // gets past its loop.
    expect(await linesOf(r, 'steps.txt')).toHaveLength(report.steps - 1);
    expect(existsSync(join(r.cwd, 'finished'))).toBe(false);
  });

  it('stops a loop whose memory keeps growing after TRAINYARD_PROBE_MAX_STEPS steps, 20 unless set', async () => {
    const script = `${MLP}
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
for i in range(100):
    kept.append(torch.ones(1_000_000))
    optimizer.zero_grad()
    loss().backward()
    optimizer.step()
    mark(i)
open("finished", "w").close()
`;
    const byDefault = await run(script);
    expect(byDefault.code, byDefault.stderr).toBe(0);
    const report = await reportOf(byDefault);
    expect(report).toMatchObject({ steps: 20, done: true, reason: 'maxSteps', device: 'cpu' });
    // 20 tensors of 4 MB each are kept.
    expect(report.peakRssBytes).toBeGreaterThan(80 * 1024 * 1024);
    expect(report.stepMs).toBeGreaterThan(0);
    expect(await linesOf(byDefault, 'steps.txt')).toHaveLength(19);
    expect(existsSync(join(byDefault.cwd, 'finished'))).toBe(false);

    const five = await run(script, { env: { TRAINYARD_PROBE_MAX_STEPS: '5' } });
    expect(five.code, five.stderr).toBe(0);
    expect(await reportOf(five)).toMatchObject({ steps: 5, done: true, reason: 'maxSteps' });
    expect(await linesOf(five, 'steps.txt')).toHaveLength(4);
  });

  const fourSteps = { TRAINYARD_PROBE_MAX_STEPS: '4', TRAINYARD_PROBE_PLATEAU_STEPS: '1000' };

  it('counts a step of an optimizer subclass calling super().step() once', async () => {
    // A plain SGD made first has its own step hooked too: MySGD's step goes through both.
    const r = await run(
      `${MLP}
other = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)

class MySGD(torch.optim.SGD):
    def step(self, closure=None):
        return super().step(closure)

optimizer = MySGD(model.parameters(), lr=0.01)
for i in range(50):
    mark(i)
    optimizer.zero_grad()
    loss().backward()
    optimizer.step()
open("finished", "w").close()
`,
      { env: fourSteps },
    );
    expect(r.code, r.stderr).toBe(0);
    const report = await reportOf(r);
    expect(report).toMatchObject({ steps: 4, done: true, reason: 'maxSteps' });
    expect(await linesOf(r, 'steps.txt')).toEqual(['0', '1', '2', '3']);
    expect(existsSync(join(r.cwd, 'finished'))).toBe(false);
  });

  it('counts Adam’s steps once, under an LR scheduler that wraps the optimizer’s step', async () => {
    const r = await run(
      `${MLP}
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
for i in range(50):
    mark(i)
    optimizer.zero_grad()
    loss().backward()
    optimizer.step()
    scheduler.step()
open("finished", "w").close()
`,
      { env: fourSteps },
    );
    expect(r.code, r.stderr).toBe(0);
    const report = await reportOf(r);
    expect(report).toMatchObject({ steps: 4, done: true, reason: 'maxSteps' });
    expect(report.stepMs).toBeGreaterThan(0);
    expect(await linesOf(r, 'steps.txt')).toEqual(['0', '1', '2', '3']);
  });

  it('reports a Python process that never steps an optimizer, and lets it finish', async () => {
    const r = await run(`${MLP}
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
print("loss", float(loss()))
`);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^loss \d/);
    const report = await reportOf(r);
    expect(report).toMatchObject({ steps: 0, done: false, reason: null, device: 'cpu' });
    expect(report.peakVramBytes).toBeNull();
    expect(report.stepMs).toBeNull();
  });

  it('reports a script without torch, and imports no torch for it', async () => {
    const r = await run(`import sys\nprint("torch" in sys.modules, "hello")\n`);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('False hello\n');
    expect(await reportOf(r)).toMatchObject({ steps: 0, done: false, reason: null });
  });

  it('does nothing without TRAINYARD_PROBE_REPORT', async () => {
    const r = await run(
      `import sys\nprint(sys.modules["sitecustomize"].__file__, [type(f).__module__ for f in sys.meta_path if type(f).__module__ == "sitecustomize"])\n`,
      { probe: false },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${join(PROBE, 'sitecustomize.py')} []\n`);
    expect(r.stderr).toBe('');
    expect((await readdir(r.cwd)).sort()).toEqual(['script.py']);
  });

  it('still runs the sitecustomize it shadows on PYTHONPATH', async () => {
    const other = join(dir.path, 'other-site');
    await mkdir(other, { recursive: true });
    await writeFile(
      join(other, 'sitecustomize.py'),
      'import builtins\nbuiltins.CHAINED = __file__\n',
    );
    const script = 'print(CHAINED)\n';
    for (const probe of [true, false]) {
      const r = await run(script, { probe, pythonPath: `${PROBE}:${other}` });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`${join(other, 'sitecustomize.py')}\n`);
      expect(existsSync(r.report)).toBe(probe);
    }
  });

  it('leaves the figures of the last step, not done, when the script fails, and passes its error on', async () => {
    const r = await run(
      `${MLP}
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(50):
    optimizer.zero_grad()
    loss().backward()
    optimizer.step()
    if i == 1:
        raise RuntimeError("the user's own failure")
`,
      { env: { TRAINYARD_PROBE_PLATEAU_STEPS: '1000' } },
    );
    expect(r.code).not.toBe(0);
    expect(r.code).not.toBeNull();
    expect(r.stderr).toContain("RuntimeError: the user's own failure");
    const report = await reportOf(r);
    expect(report).toMatchObject({ steps: 2, done: false, reason: null, device: 'cpu' });
    expect(report.stepMs).toBeGreaterThan(0);
    expect(report.peakRssBytes).toBeGreaterThan(10 * 1024 * 1024);
  });

  it('passes on an exception raised inside step() itself, uncounted', async () => {
    const r = await run(`${MLP}
class Failing(torch.optim.SGD):
    def step(self, closure=None):
        raise ValueError("step failed")

optimizer = Failing(model.parameters(), lr=0.01)
try:
    optimizer.step()
except ValueError as err:
    print("caught", err)
`);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('caught step failed\n');
    expect(await reportOf(r)).toMatchObject({ steps: 0, done: false });
  });
});

describe('reading a probe’s report', () => {
  it.runIf(process.getuid?.() === 0)(
    'reads only a report that the probe directory’s owner (the job’s user) owns',
    async () => {
      const dir = await tempDir();
      try {
        const report = join(dir.path, 'report.json');
        await writeFile(report, JSON.stringify({ python: true, steps: 3 }));
        expect(readProbeReport(dir.path)).toEqual({ python: true, steps: 3 });
        await chown(report, 2_999_999, 2_999_999);
        expect(readProbeReport(dir.path)).toBeNull();
        await chown(dir.path, 2_999_999, 2_999_999);
        expect(readProbeReport(dir.path)).toEqual({ python: true, steps: 3 });
      } finally {
        await dir.remove();
      }
    },
  );
});
