import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Subjects } from '@trainyard/events';
import { connectBus, createLogger, type Bus } from '@trainyard/service-kit';
import { startTestNats, waitFor } from '@trainyard/testkit';
import { watchHeartbeats } from '../src/heartbeats.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'api-heartbeats');
});
afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

const beat = (workerId: string) =>
  bus.js.publish(Subjects.heartbeat(workerId), JSON.stringify({ workerId }));

describe('the API’s view of the heartbeats', () => {
  it('holds each worker’s last beat from the stream, then follows new ones', async () => {
    const first = await beat('w1');
    await beat('w2');
    const view = watchHeartbeats(bus, createLogger('test'));
    try {
      await waitFor('the view to catch up', () => view.ready);
      const w1 = view.lastSeen('w1');
      expect(w1).not.toBeNull();
      expect(view.lastSeen('w2')).not.toBeNull();
      expect(view.lastSeen('w9')).toBeNull();
      const stored = await bus.jsm.streams.getMessage('TY_HEARTBEATS', { seq: first.seq });
      expect(w1).toBe(stored!.time.toISOString());

      await new Promise((r) => setTimeout(r, 20));
      await beat('w1');
      await beat('w3');
      await waitFor('the new beats to arrive', () => view.lastSeen('w3') !== null);
      expect(Date.parse(view.lastSeen('w1')!)).toBeGreaterThan(Date.parse(w1!));
    } finally {
      await view.stop();
    }
  });

  it('is ready at once on a stream with no heartbeat, and stops cleanly', async () => {
    await bus.jsm.streams.purge('TY_HEARTBEATS');
    const view = watchHeartbeats(bus, createLogger('test'));
    await waitFor('the view to be ready', () => view.ready);
    expect(view.lastSeen('w1')).toBeNull();
    await view.stop();
  });
});
