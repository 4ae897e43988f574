import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestNats, waitFor } from '@trainyard/testkit';
import { connectBus, KvLease, type Bus } from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'lease-test');
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
});

describe('KV lease', () => {
  it('has one holder at a time; the other takes it once the holder stops renewing', async () => {
    const a = await KvLease.open(bus.js, 'one-holder', 'a', 600);
    const b = await KvLease.open(bus.js, 'one-holder', 'b', 600);
    expect(await a.tryAcquire()).toBe(true);
    expect(await b.tryAcquire()).toBe(false);
    expect(await a.tryAcquire()).toBe(true);
    expect(await b.tryAcquire()).toBe(false);
    await waitFor('b to take the lease after its TTL', () => b.tryAcquire(), {
      timeoutMs: 5_000,
      intervalMs: 100,
    });
    expect(await a.tryAcquire()).toBe(false);
    await b.release();
    expect(await a.tryAcquire()).toBe(true);
  });

  it('survives a renewal that gets no answer, but not past the TTL', async () => {
    const lost = await connectBus(nats.url, 'lease-test-lost');
    const a = await KvLease.open(lost.js, 'unanswered', 'a', 1_000);
    expect(await a.tryAcquire()).toBe(true);
    const renewedAt = Date.now();
    await lost.nc.close();
    expect(await a.tryAcquire()).toBe(true);
    await waitFor('the lease to lapse', () => !a.held, { timeoutMs: 3_000, intervalMs: 20 });
    expect(Date.now() - renewedAt).toBeGreaterThanOrEqual(700);
    expect(Date.now() - renewedAt).toBeLessThan(1_000);
    expect(await a.tryAcquire()).toBe(false);
  });
});
