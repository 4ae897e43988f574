import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gpu } from '@trainyard/events';
import type { GpuInventory, GpuReading } from '@trainyard/runtime';
import { tempDir, waitFor } from '@trainyard/testkit';
import { startTestStack, submit, type TestStack } from './harness.ts';
import { BIN } from './processes.ts';

const GiB = 1024 ** 3;

/**
 * A host with two GPUs of different models, read as `nvidia-smi` would read them: the worker
 * lists them when it registers and reads their use for every heartbeat.
 */
class MixedHost implements GpuInventory {
  async list(): Promise<Gpu[]> {
    return [
      { index: 0, name: 'NVIDIA L4', uuid: 'GPU-l4', vramBytes: 24 * GiB, simulated: true },
      {
        index: 1,
        name: 'NVIDIA A100-SXM4-80GB',
        uuid: 'GPU-a100',
        vramBytes: 80 * GiB,
        simulated: true,
      },
    ];
  }

  async read(): Promise<GpuReading[]> {
    return [
      { index: 0, usedBytes: 3 * GiB, utilPct: 42 },
      { index: 1, usedBytes: 0, utilPct: 0 },
    ];
  }
}

let t: TestStack;
let token: string;
let work: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  t = await startTestStack({ inventory: new MixedHost() });
  token = await t.token();
  work = await tempDir('trainyard-gpus-');
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

const gpuJob = (gpuModel: string | undefined, command: string) => ({
  name: 'gpu',
  command,
  resources: { gpus: 1, vramGb: 4, ...(gpuModel && { gpuModel }) },
  maxRetries: 0,
});

describe('GPUs by model, and their use', () => {
  it("shows each GPU's model, memory used and total, and utilisation from the heartbeats", async () => {
    type WorkerView = {
      id: string;
      gpus: { index: number; name: string; usedBytes: number | null; utilPct: number | null }[];
    };
    const local = await waitFor('a heartbeat with the GPUs', async () => {
      const workers = (await (await t.http('/v1/workers', { token })).json()) as WorkerView[];
      const w = workers.find((x) => x.id === 'local');
      return w?.gpus[0]?.usedBytes !== null ? w : undefined;
    });
    expect(local.gpus).toEqual([
      expect.objectContaining({ index: 0, name: 'NVIDIA L4', usedBytes: 3 * GiB, utilPct: 42 }),
      expect.objectContaining({ index: 1, name: 'NVIDIA A100-SXM4-80GB', usedBytes: 0 }),
    ]);
    const printed = await new Promise<string>((done, fail) =>
      execFile(
        process.execPath,
        [BIN, 'workers'],
        {
          env: {
            ...process.env,
            TRAINYARD_API_URL: t.url,
            TRAINYARD_TOKEN: token,
            XDG_CONFIG_HOME: join(work.path, 'config'),
          },
        },
        (err, stdout, stderr) => (err ? fail(new Error(stderr)) : done(stdout)),
      ),
    );
    expect(printed).toMatch(/GPU USE/);
    expect(printed).toContain(
      '1x NVIDIA L4 (24 GiB), 1x NVIDIA A100-SXM4-80GB (80 GiB) [simulated]',
    );
    expect(printed).toContain('0: 3/24 GiB 42%  1: 0/80 GiB 0%');
  });

  it('places a job that names a model on a GPU of that model, numbered as nvidia-smi numbers it', async () => {
    // No worker has an H100: refused at once, saying what it needs and what the workers have.
    const never = await submit(t, token, gpuJob('H100', 'true'));
    expect(never.status).toBe(400);
    const refused = (await never.json()) as { error: { code: string; message: string } };
    expect(refused.error.code).toBe('UNSATISFIABLE');
    expect(refused.error.message).toContain('it needs 1 H100 GPU with 4 GiB free');
    expect(refused.error.message).toContain('2 GPUs of up to 80 GiB');
    const res = await submit(
      t,
      token,
      gpuJob('a100', 'echo "gpus=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER"'),
    );
    const { id } = (await res.json()) as { id: string };
    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded');
    expect(job.attempts[0]!.gpus).toEqual([1]);
    const log = await (await t.http(`/v1/jobs/${id}/logs`, { token })).text();
    expect(log).toContain('gpus=1 order=PCI_BUS_ID');
  });

  it('refuses a GPU model on a job that asks for no GPU, naming the field', async () => {
    const res = await submit(t, token, {
      name: 'cpu',
      command: 'true',
      resources: { gpus: 0, gpuModel: 'A100' },
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('VALIDATION_FAILED');
    expect(body.error.message).toContain('resources.gpuModel');
  });
});
