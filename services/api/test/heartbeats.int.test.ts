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

const beat = (workerId: string, usedBytes = 0) =>
  bus.js.publish(
    Subjects.heartbeat(workerId),
    JSON.stringify({
      workerId,
      at: new Date().toISOString(),
      gpus: [{ index: 0, usedBytes, utilPct: 50 }],
      runningAttempts: [],
    }),
  );

describe('the API’s view of the heartbeats', () => {
  it('holds each worker’s last beat from the stream, then follows new ones', async () => {
    const first = await beat('w1');
    await beat('w2');
    const view = watchHeartbeats(bus, createLogger('test'));
    try {
      await waitFor('the view to catch up', () => view.ready);
      const w1 = view.last('w1')?.at;
      expect(w1).toBeDefined();
      expect(view.last('w2')).not.toBeNull();
      expect(view.last('w9')).toBeNull();
      const stored = await bus.jsm.streams.getMessage('TY_HEARTBEATS', { seq: first.seq });
      expect(w1).toBe(stored!.time.toISOString());

      await new Promise((r) => setTimeout(r, 20));
      await beat('w1', 5 * 1024 ** 3);
      await beat('w3');
      await bus.js.publish(Subjects.heartbeat('w4'), 'not a heartbeat');
      await waitFor('the new beats to arrive', () => view.last('w4') !== null);
      expect(Date.parse(view.last('w1')!.at)).toBeGreaterThan(Date.parse(w1!));
      expect(view.last('w1')!.gpus).toEqual([{ index: 0, usedBytes: 5 * 1024 ** 3, utilPct: 50 }]);
      expect(view.last('w4')!.gpus).toEqual([]);
    } finally {
      await view.stop();
    }
  });

  it('is ready at once on a stream with no heartbeat, and stops cleanly', async () => {
    await bus.jsm.streams.purge('TY_HEARTBEATS');
    const view = watchHeartbeats(bus, createLogger('test'));
    await waitFor('the view to be ready', () => view.ready);
    expect(view.last('w1')).toBeNull();
    await view.stop();
  });

  it('stops when told to while its reader is still being made (an API that fails to start)', async () => {
    const view = watchHeartbeats(bus, createLogger('test'));
    const stopped = await Promise.race([
      view.stop().then(() => 'stopped'),
      new Promise((r) => setTimeout(() => r('still running after 5 s'), 5_000)),
    ]);
    expect(stopped).toBe('stopped');
  });
});
