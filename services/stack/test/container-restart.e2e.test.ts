import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Labels } from '@trainyard/runtime';
import { tempDir, testDocker, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { startWorkerProcess, type ServiceProcess } from './processes.ts';

/** A worker of the Docker runtime killed and started again while its container runs on. */
const docker = testDocker();
let t: TestStack;
let token: string;
let dir: Awaited<ReturnType<typeof tempDir>>;
const workers: ServiceProcess[] = [];

function worker(name: string): ServiceProcess {
  const w = startWorkerProcess(name, {
    natsUrl: t.natsUrl,
    sandboxRoot: dir.path,
    docker: { host: docker.host, registry: docker.registry },
  });
  workers.push(w);
  return w;
}

beforeAll(async () => {
  t = await startTestStack({ localWorker: false, heartbeatTimeoutMs: 30_000, containers: docker });
  token = await t.token();
  dir = await tempDir('trainyard-docker-workers-');
});

afterAll(async () => {
  for (const w of workers) await w.kill9();
  await t?.stop();
  await dir?.remove();
});

const containersOf = (jobId: string) =>
  docker.docker.listContainers({ all: true, filters: { label: [`${Labels.job}=${jobId}`] } });

describe('a worker of the Docker runtime restarted while its container runs', () => {
  it('finds the container by its labels and takes it over: one attempt, its whole log once', async () => {
    const first = worker('w-boxed');
    const train = [
      'import time',
      'for i in range(1, 41):',
      '    print(f"line {i}", flush=True)',
      '    time.sleep(0.1)',
    ].join('\n');
    const res = await submit(
      t,
      token,
      { name: 'outlives', command: 'python3 train.py', image: 'python', resources: { gpus: 0 } },
      await codeArchive({ 'train.py': train }),
    );
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, token, (j) => j.status === 'running', 60_000);
    await waitFor('a few lines of output', async () =>
      (await (await t.http(`/v1/jobs/${id}/logs?attempt=1`, { token })).text()).includes(
        'line 3\n',
      ),
    );
    await first.kill9();
    expect(await containersOf(id)).toHaveLength(1);
    worker('w-boxed');

    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(done.attempts.map((a) => [a.number, a.workerId, a.status])).toEqual([
      [1, 'w-boxed', 'succeeded'],
    ]);
    const log = await (await t.http(`/v1/jobs/${id}/logs?attempt=1`, { token })).text();
    // Attempt 0's lines (the build) come first; the attempt's own, each once, after them.
    expect(log.split('\n').filter((l) => l.startsWith('line '))).toEqual(
      Array.from({ length: 40 }, (_, i) => `line ${i + 1}`),
    );
    await waitFor('its container to be removed', async () => (await containersOf(id)).length === 0);
  });
});
