import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EMPTY_HEAD } from '@trainyard/events';
import { loadJob, runJobCommand } from '@trainyard/application';
import { type ServiceContext } from '@trainyard/service-kit';
import { startTestNats, testContext, waitFor } from '@trainyard/testkit';
import { DEFAULT_SCHEDULER_OPTIONS, startScheduler } from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let ctx: ServiceContext;
const meta = () => ({ actor: { kind: 'service' as const, id: 'test' }, now: new Date() });
const opts = { ...DEFAULT_SCHEDULER_OPTIONS, leaseTtlMs: 1_000, snapshotEveryEvents: 3 };

async function submit(id: string) {
  await runJobCommand(
    ctx.bus.store,
    id,
    {
      type: 'SubmitJob',
      owner: 'alice',
      spec: {
        name: id,
        command: 'true',
        resources: { gpus: 1, vramGb: 4 },
        priority: 0,
        maxRetries: 0,
        env: {},
      },
    },
    meta(),
  );
}

const status = async (id: string) => (await loadJob(ctx.bus.store, id)).state.status;

beforeAll(async () => {
  nats = await startTestNats();
  ctx = await testContext(nats.url, 'scheduler-test');
  await ctx.bus.store.append({
    aggregate: 'worker',
    aggregateId: 'w1',
    head: EMPTY_HEAD,
    events: [
      {
        type: 'WorkerRegistered',
        data: {
          name: 'w1',
          hostname: 'h',
          cpuSlots: 0,
          runtime: 'simulated',
          version: 't',
          runningAttempts: [],
          gpus: [{ index: 0, name: 'sim', uuid: 'u0', vramBytes: 24 * 1024 ** 3, simulated: true }],
        },
      },
    ],
    meta: meta(),
  });
});

afterAll(async () => {
  await ctx.bus.close();
  await nats.stop();
});

describe('scheduler snapshots', () => {
  it('lets a new leader start from the snapshot and still see every job', async () => {
    for (const id of ['j1', 'j2', 'j3']) await submit(id);
    const first = await startScheduler(ctx, opts);
    for (const id of ['j1', 'j2', 'j3'])
      await waitFor(`${id} assigned`, async () => (await status(id)) === 'assigned');
    expect(first.termStartSeq()).toBe(1);
    await first.stop();
    const logEndAtStop = await ctx.bus.store.lastSeq();
    const snapshotSeq = await waitFor('the snapshot left by the first leader', async () => {
      const blob = await ctx.blobs.get('scheduler/cluster-snapshot.json');
      if (!blob) return undefined;
      const chunks: Buffer[] = [];
      for await (const c of blob) chunks.push(c as Buffer);
      return (JSON.parse(Buffer.concat(chunks).toString()) as { lastSeq: number }).lastSeq;
    });

    for (const id of ['j4', 'j5']) await submit(id);
    const second = await startScheduler(ctx, opts);
    await waitFor('the new leader', () => second.isLeader());
    for (const id of ['j4', 'j5'])
      await waitFor(`${id} assigned`, async () => (await status(id)) === 'assigned');
    expect(snapshotSeq).toBeGreaterThan(3);
    expect(snapshotSeq).toBeLessThanOrEqual(logEndAtStop);
    expect(second.termStartSeq()).toBe(snapshotSeq + 1);
    expect(second.termStartSeq()).toBeGreaterThan(1);
    const w = await Promise.all(
      ['j1', 'j2', 'j3', 'j4', 'j5'].map(
        async (id) => (await loadJob(ctx.bus.store, id)).state.attempts,
      ),
    );
    expect(w.map((a) => a.length)).toEqual([1, 1, 1, 1, 1]);
    await second.stop();
  });
});
