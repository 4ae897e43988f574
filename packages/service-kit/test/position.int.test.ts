import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestNats } from '@trainyard/testkit';
import { connectBus, LogPosition, type Bus } from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'position-test');
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
});

describe('log position', () => {
  it('saves no further than an event still in flight; a reader restarted in the process resumes after what it read', async () => {
    const p = await LogPosition.open(bus.js, 'reader');
    expect(p.resumeAt).toBe(1);
    p.read(1);
    p.read(2, true);
    p.read(3);
    p.read(4, true);
    expect(p.safe).toBe(1);
    expect(p.resumeAt).toBe(5);
    p.done(2);
    expect(p.safe).toBe(3);
    await p.save();
    expect((await LogPosition.open(bus.js, 'reader')).resumeAt).toBe(4);
    p.done(4);
    await p.save();
    expect((await LogPosition.open(bus.js, 'reader')).resumeAt).toBe(5);
    expect((await LogPosition.open(bus.js, 'other')).resumeAt).toBe(1);
  });
});
