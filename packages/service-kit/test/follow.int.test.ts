import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { EMPTY_HEAD, EventStore } from '@trainyard/events';
import { jobSubmitted, startTestNats, testMeta, waitFor } from '@trainyard/testkit';
import { connectBus, followLog, type Bus } from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'follow-test');
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
});

async function submit(id: string): Promise<number> {
  const { head } = await bus.store.append({
    aggregate: 'job',
    aggregateId: id,
    head: EMPTY_HEAD,
    events: [jobSubmitted()],
    meta: testMeta(),
  });
  return head.seq;
}

/** The log as a server whose count stayed off after a failover serves it: one too many waiting. */
class MiscountingStore extends EventStore {
  override async reader(opts: Parameters<EventStore['reader']>[0]): Promise<ConsumerMessages> {
    const real = await super.reader(opts);
    const miscounted = {
      stop: () => real.stop(),
      async *[Symbol.asyncIterator]() {
        for await (const m of real as AsyncIterable<JsMsg>) {
          yield { seq: m.seq, string: () => m.string(), info: { pending: m.info.pending + 1 } };
        }
      },
    };
    return miscounted as unknown as ConsumerMessages;
  }
}

/** The log as a server slow to create readers serves it. */
class SlowStore extends EventStore {
  override async reader(opts: Parameters<EventStore['reader']>[0]): Promise<ConsumerMessages> {
    await new Promise((r) => setTimeout(r, 200));
    return super.reader(opts);
  }
}

describe('following the log', () => {
  it('returns when stopped while its reader is being created', async () => {
    const stop = new AbortController();
    const following = followLog(
      new SlowStore(bus.js, bus.jsm),
      { fromSeq: 1, signal: stop.signal },
      () => undefined,
    );
    setTimeout(() => stop.abort(), 20);
    await expect(
      Promise.race([
        following.then(() => 'returned'),
        new Promise((r) => setTimeout(() => r('still reading'), 3_000)),
      ]),
    ).resolves.toBe('returned');
  });

  it('says when it has caught up, and again after each new event', async () => {
    const first = await submit('f1');
    const stop = new AbortController();
    const read: number[] = [];
    let caughtUp = 0;
    const following = followLog(
      bus.store,
      { fromSeq: first, signal: stop.signal, onCaughtUp: () => caughtUp++ },
      (e) => void read.push(e.seq),
    );
    await waitFor('caught up', () => caughtUp === 1);
    const second = await submit('f2');
    await waitFor('caught up again', () => caughtUp === 2);
    expect(read).toEqual([first, second]);
    stop.abort();
    await following;
  });

  it('says it has caught up when nothing in the log passes its filter', async () => {
    await submit('n1');
    const stop = new AbortController();
    const read: number[] = [];
    let caughtUp = 0;
    const following = followLog(
      bus.store,
      {
        fromSeq: 1,
        filter: 'ty.ev.session.>',
        signal: stop.signal,
        onCaughtUp: () => caughtUp++,
      },
      (e) => void read.push(e.seq),
    );
    await waitFor('caught up', () => caughtUp === 1);
    expect(read).toEqual([]);
    stop.abort();
    await following;
  });

  it('asks the log when its count says more waits and none comes; a wrong count ends the reader', async () => {
    const first = await submit('m1');
    const second = await submit('m2');
    const store = new MiscountingStore(bus.js, bus.jsm);
    const read: number[] = [];
    let caughtUp = 0;
    let miscounted: number | undefined;
    await followLog(
      store,
      {
        fromSeq: first,
        signal: new AbortController().signal,
        quietMs: 50,
        onCaughtUp: () => caughtUp++,
        onMiscount: (at) => (miscounted = at),
      },
      (e) => void read.push(e.seq),
    );
    expect(read).toEqual([first, second]);
    expect(caughtUp).toBe(1);
    expect(miscounted).toBe(second);
  });
});
