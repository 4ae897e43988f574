import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '@trainyard/testkit';
import { startTestStack, submit, type TestStack } from './harness.ts';
import { startWorkerProcess, type ServiceProcess } from './processes.ts';

let t: TestStack;
let token: string;
let dir: Awaited<ReturnType<typeof tempDir>>;
const workers: ServiceProcess[] = [];

function worker(name: string): ServiceProcess {
  const w = startWorkerProcess(name, { natsUrl: t.natsUrl, sandboxRoot: dir.path });
  workers.push(w);
  return w;
}

beforeAll(async () => {
  t = await startTestStack({ localWorker: false, heartbeatTimeoutMs: 30_000 });
  token = await t.token();
  dir = await tempDir('trainyard-workers-');
});

afterAll(async () => {
  for (const w of workers) await w.kill9();
  await t?.stop();
  await dir?.remove();
});

describe('a worker restarted within the heartbeat timeout', () => {
  it('re-attaches to the attempt that still runs: one attempt, its whole log once, its outputs and metrics', async () => {
    const first = worker('w-restart');
    const res = await submit(t, token, {
      name: 'outlives-its-worker',
      command:
        'echo "pid=$$"; for i in $(seq 1 30); do echo "line $i"; echo "TRAINYARD_METRIC {\\"step\\": $i, \\"loss\\": $i}"; echo "{\\"step\\": $i, \\"acc\\": $i}" >> "$TRAINYARD_METRICS_FILE"; echo $i > "$TRAINYARD_OUTPUT_DIR/progress"; sleep 0.1; done',
      resources: { gpus: 0 },
    });
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, token, (j) => j.status === 'running', 30_000);
    await waitFor('a few lines of output', async () =>
      (await (await t.http(`/v1/jobs/${id}/logs`, { token })).text()).includes('line 3\n'),
    );

    await first.kill9();
    worker('w-restart');

    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(done.attempts.map((a) => [a.number, a.workerId, a.status])).toEqual([
      [1, 'w-restart', 'succeeded'],
    ]);
    const log = await (await t.http(`/v1/jobs/${id}/logs`, { token })).text();
    const lines = Array.from({ length: 30 }, (_, i) => `line ${i + 1}`);
    expect(log).toMatch(/^pid=\d+\n/);
    expect(log.split('\n').filter((l) => l.startsWith('line '))).toEqual(lines);
    expect(await (await t.http(`/v1/jobs/${id}/outputs/progress`, { token })).text()).toBe('30\n');
    // Every point once: those the worker before read but had not sent are read again.
    const metrics = await waitFor('every point of the job', async () => {
      const m = (await (await t.http(`/v1/jobs/${id}/metrics?limit=100`, { token })).json()) as {
        summary: { name: string; count: number; min: number; max: number }[];
      };
      return m.summary.every((s) => s.count === 30) && m.summary.length === 2 ? m : undefined;
    });
    expect(metrics.summary).toMatchObject([
      { name: 'acc', count: 30, min: 1, max: 30 },
      { name: 'loss', count: 30, min: 1, max: 30 },
    ]);

    const { events } = await t.stack.ctx.bus.store.load('worker', 'w-restart');
    const registrations = events.filter((e) => e.type === 'WorkerRegistered');
    expect(registrations).toHaveLength(2);
    expect(registrations[1]!.data).toMatchObject({ runningAttempts: [done.attempts[0]!.id] });
  });
});
