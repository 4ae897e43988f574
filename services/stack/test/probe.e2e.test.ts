import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { codeArchive, startTestStack, submit, type Job, type TestStack } from './harness.ts';

/**
 * The VRAM/RAM probe through the whole stack, with PyTorch on the CPU in the process runtime:
 * a job that asks for a GPU and declares no VRAM is measured first, then placed by what was
 * measured; one the probe cannot measure fails as the job's own fault, saying why.
 */
const EXAMPLES = resolve(fileURLToPath(new URL('../../../examples', import.meta.url)));
const MiB = 1024 ** 2;

let t: TestStack;
let token: string;

beforeAll(async () => {
  t = await startTestStack({ inventory: SimulatedInventory.parse('1x10GiB') });
  token = await t.token();
});

afterAll(async () => {
  await t?.stop();
});

async function run(
  name: string,
  command: string,
  files: Record<string, string>,
  env: Record<string, string> = {},
): Promise<Job> {
  const res = await submit(
    t,
    token,
    { name, command, resources: { gpus: 1 }, env, maxRetries: 0 },
    await codeArchive(files),
  );
  expect(res.status).toBe(202);
  const { id } = (await res.json()) as { id: string };
  return t.waitForJob(id, token, (j) => j.status === 'succeeded' || j.status === 'failed', 90_000);
}

const log = async (id: string) => (await t.http(`/v1/jobs/${id}/logs`, { token })).text();

describe('the probe', () => {
  it('measures the digits example’s first steps, stops it early, then runs it whole from the start', async () => {
    const train = await readFile(join(EXAMPLES, 'digits-mlp', 'train.py'), 'utf8');
    const seen: string[] = [];
    const res = await submit(
      t,
      token,
      { name: 'digits', command: 'python3 train.py', resources: { gpus: 1 }, env: { EPOCHS: '3' } },
      await codeArchive({ 'train.py': train }),
    );
    const { id } = (await res.json()) as { id: string };
    const job = await t.waitForJob(
      id,
      token,
      (j) => {
        if (seen.at(-1) !== j.status) seen.push(j.status);
        return j.status === 'succeeded' || j.status === 'failed';
      },
      90_000,
    );
    expect(job.status).toBe('succeeded');
    expect(seen).toContain('estimating');
    expect(seen.indexOf('estimating')).toBeLessThan(seen.indexOf('succeeded'));
    const [probe, whole] = job.attempts;
    expect(probe).toMatchObject({ number: 1, probe: true, status: 'succeeded' });
    expect(whole).toMatchObject({ number: 2, probe: false, status: 'succeeded' });
    const estimate = job.estimate!;
    expect(estimate.device).toBe('cpu');
    expect(estimate.vramBytes).toBe(0);
    // An epoch is 22 steps: the probe stopped on the plateau, well before the first epoch ended.
    expect(estimate.steps).toBeGreaterThanOrEqual(3);
    expect(estimate.steps).toBeLessThan(20);
    expect(estimate.ramBytes).toBeGreaterThan(50 * MiB);
    expect(estimate.stepMs).toBeGreaterThan(0);
    // Epoch 1 ends once in the log, in the whole run: the probe never got that far.
    expect((await log(id)).match(/epoch {3}1 {2}loss/g)).toHaveLength(1);
    const metrics = await t.http(`/v1/jobs/${id}/outputs/metrics.jsonl`, { token });
    const epochs = (await metrics.text())
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { epoch: number }).epoch);
    expect(epochs).toEqual([1, 2, 3]);
  });

  it('stops the rest of the command once the probe has measured, and runs it all afterwards', async () => {
    const job = await run('chain', 'python3 fit.py && sleep 2 && echo after the training', {
      'fit.py': [
        'import torch',
        'torch.set_num_threads(1)',
        'm = torch.nn.Linear(8, 1)',
        'opt = torch.optim.SGD(m.parameters(), lr=0.01)',
        'for i in range(200):',
        '    opt.zero_grad()',
        '    m(torch.ones(4, 8)).sum().backward()',
        '    opt.step()',
        '',
      ].join('\n'),
    });
    expect(job.status).toBe('succeeded');
    expect(job.attempts.map((a) => a.probe)).toEqual([true, false]);
    // Once in the whole log: the real run's. The probe's command was stopped once it had
    // measured, before the rest of its line could run.
    expect((await log(job.id)).match(/after the training/g)).toHaveLength(1);
  });

  it('fails a command that starts no Python, as the job’s fault, without retrying', async () => {
    const job = await run('shell', 'echo not python', {});
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'probeNotPython' });
    expect(job.failure!.message).toContain('declare vramGb');
    expect(job.exitCode).toBeNull();
    expect(job.attempts).toHaveLength(1);
  });

  it('fails a Python script that never steps an optimizer', async () => {
    const job = await run('no-step', 'python3 eval.py', {
      'eval.py': 'import torch\nprint(torch.nn.Linear(4, 2)(torch.ones(1, 4)).sum().item())\n',
    });
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'probeNoStep' });
    expect(job.attempts.map((a) => a.probe)).toEqual([true]);
  });

  it('fails a script that crashes while the probe watches it, saying after how many steps', async () => {
    const job = await run('crash', 'python3 crash.py', {
      'crash.py': [
        'import torch',
        'm = torch.nn.Linear(4, 1)',
        'opt = torch.optim.SGD(m.parameters(), lr=0.1)',
        'for i in range(2):',
        '    m(torch.ones(1, 4)).sum().backward()',
        '    opt.step()',
        'raise SystemExit(7)',
        '',
      ].join('\n'),
    });
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'probeCrashed' });
    expect(job.failure!.message).toContain('after 2 optimizer steps');
    expect(job.exitCode).toBe(7);
  });
});
