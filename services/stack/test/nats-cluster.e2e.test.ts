import { afterAll, describe, expect, it } from 'vitest';
import { ChainVerifier, Streams } from '@trainyard/events';
import {
  clusterNatsServer,
  startTestNatsCluster,
  waitFor,
  type TestNatsCluster,
} from '@trainyard/testkit';
import { startTestStack, submit, type TestStack } from './harness.ts';

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanup.reverse()) await c();
});

const job = (i: number) => ({
  name: `c${i}`,
  command: `sleep 0.2; echo job ${i}`,
  resources: { gpus: 0 },
});

/** Submits like a client: a 503 while the cluster elects a leader is tried again. */
async function submitJob(t: TestStack, token: string, i: number): Promise<string> {
  const res = await waitFor(
    'the API to accept the job',
    async () => {
      const r = await submit(t, token, job(i));
      return r.status === 503 ? undefined : r;
    },
    { timeoutMs: 30_000, intervalMs: 250 },
  );
  expect(res.status).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

async function streamLeader(t: TestStack): Promise<string> {
  return waitFor('the event stream to have a leader', async () => {
    const info = await t.stack.ctx.bus.jsm.streams.info(Streams.events);
    return info.cluster?.leader || undefined;
  });
}

describe('a 3-node NATS cluster losing a node mid-run', () => {
  let cluster: TestNatsCluster;
  let t: TestStack;

  it('loses no acknowledged event; jobs finish and every service carries on by itself', async () => {
    cluster = await startTestNatsCluster(3);
    cleanup.push(() => cluster.stop());
    t = await startTestStack({ natsUrl: cluster.url, streamReplicas: 3 });
    cleanup.push(() => t.stop());
    const token = await t.token();
    if (clusterNatsServer()) expect(t.stack.ctx.bus.nc.info?.version).toMatch(/^2\.10\./);

    const before: string[] = [];
    for (let i = 0; i < 4; i++) before.push(await submitJob(t, token, i));
    await t.waitForJob(
      before[0]!,
      token,
      (j) => j.status === 'running' || j.status === 'succeeded',
    );
    const acknowledged = new Set<string>();
    for await (const e of t.stack.ctx.bus.store.replay()) acknowledged.add(e.id);

    const leader = await streamLeader(t);
    await cluster.node(leader).kill();
    expect(await streamLeader(t)).not.toBe(leader);

    const during: string[] = [];
    for (let i = 4; i < 8; i++) during.push(await submitJob(t, token, i));
    for (const id of [...before, ...during]) {
      const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
      expect(done.attempts).toHaveLength(1);
      const events = await t.http(`/v1/jobs/${id}/events`, { token });
      expect(events.status).toBe(200);
      const log = await t.http(`/v1/jobs/${id}/logs`, { token });
      expect(await log.text()).toMatch(/^job \d+\n$/);
    }
    await cluster.node(leader).start();
    const after = await submitJob(t, token, 8);
    await t.waitForJob(after, token, (j) => j.status === 'succeeded', 60_000);

    const verifier = new ChainVerifier();
    const present = new Set<string>();
    for await (const e of t.stack.ctx.bus.store.replay()) {
      verifier.add(e);
      present.add(e.id);
    }
    expect(verifier.breaks).toEqual([]);
    expect([...acknowledged].filter((id) => !present.has(id))).toEqual([]);
    expect(present.size).toBeGreaterThan(acknowledged.size);
  }, 180_000);
});
