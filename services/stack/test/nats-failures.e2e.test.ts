import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChainVerifier } from '@trainyard/events';
import { freePort, startNatsServer, type ChildServer } from '@trainyard/servers';
import { tempDir, waitFor } from '@trainyard/testkit';
import { startTestStack, submit, type TestStack } from './harness.ts';

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanup.reverse()) await c();
});

const cpuJob = (i: number) => ({ name: `n${i}`, command: `echo job ${i}`, resources: { gpus: 0 } });

async function runJobs(
  t: TestStack,
  token: string,
  from: number,
  count: number,
): Promise<string[]> {
  const ids: string[] = [];
  for (let i = from; i < from + count; i++) {
    const res = await waitFor(
      'the API to accept the job (a 503 during a failover is retried, as a client would)',
      async () => {
        const r = await submit(t, token, cpuJob(i));
        if (r.status === 503) return undefined;
        return r;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    expect(res.status).toBe(202);
    ids.push(((await res.json()) as { id: string }).id);
  }
  for (const id of ids) await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
  return ids;
}

async function verifiedEvents(t: TestStack): Promise<number> {
  const v = new ChainVerifier();
  for await (const e of t.stack.ctx.bus.store.replay()) v.add(e);
  expect(v.breaks).toEqual([]);
  return v.count;
}

/** A stack on a nats-server of its own that the test can kill and start again on the same port. */
async function stackOnRestartableNats() {
  const dir = await tempDir('trainyard-nats-');
  cleanup.push(() => dir.remove());
  const port = await freePort();
  const start = () => startNatsServer({ dir: join(dir.path, 'nats'), port });
  let nats: ChildServer = await start();
  cleanup.push(() => nats.stop());
  const t = await startTestStack({ natsUrl: nats.url });
  cleanup.push(() => t.stop());
  return {
    t,
    token: await t.token(),
    /** kill -9, stay away for `awayMs`, start again with the same store. */
    restartNats: async (awayMs: number) => {
      await nats.kill();
      await new Promise((r) => setTimeout(r, awayMs));
      nats = await start();
    },
  };
}

describe('a single NATS server restarted', () => {
  it('is survived: services reconnect by themselves and the log is intact', async () => {
    const { t, token, restartNats } = await stackOnRestartableNats();
    await runJobs(t, token, 0, 3);
    const acknowledged = await t.stack.ctx.bus.store.lastSeq();

    await restartNats(0);

    await waitFor('the API to reach NATS again', async () => (await t.http('/healthz')).ok, {
      timeoutMs: 20_000,
    });
    await runJobs(t, token, 3, 3);
    expect(await verifiedEvents(t)).toBeGreaterThan(acknowledged);
  });
});

describe('a running job while NATS is away', () => {
  it('keeps running; its log and outputs wait on the worker and arrive when NATS is back', async () => {
    const { t, token, restartNats } = await stackOnRestartableNats();
    const res = await submit(t, token, {
      name: 'through-the-outage',
      command:
        'for i in $(seq 1 30); do echo "line $i"; echo $i > "$TRAINYARD_OUTPUT_DIR/progress"; sleep 0.1; done; echo done > "$TRAINYARD_OUTPUT_DIR/result"',
      resources: { gpus: 0 },
    });
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, token, (j) => j.status === 'running');

    await restartNats(2_000);

    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
    expect(job.attempts).toHaveLength(1);
    const log = await (await t.http(`/v1/jobs/${id}/logs`, { token })).text();
    for (let i = 1; i <= 30; i++) expect(log).toContain(`line ${i}\n`);
    const outputs = (await (await t.http(`/v1/jobs/${id}/outputs`, { token })).json()) as {
      path: string;
    }[];
    expect(outputs.map((o) => o.path)).toEqual(['progress', 'result']);
    expect(await (await t.http(`/v1/jobs/${id}/outputs/result`, { token })).text()).toBe('done\n');
  });
});
