import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectBus, type Bus } from '@trainyard/service-kit';
import { jobSubmitted, startTestNats, testMeta } from '@trainyard/testkit';
import {
  ChainVerifier,
  ConcurrencyError,
  EMPTY_HEAD,
  Streams,
  type JobEvent,
} from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
const meta = () => testMeta(new Date('2026-01-01T00:00:00Z'));
const submitted = jobSubmitted();

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'store-test');
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
});

describe('event store on a real nats-server', () => {
  it('creates the streams with the settings the log needs, idempotently', async () => {
    const again = await connectBus(nats.url, 'store-test-2');
    await again.close();
    const info = await bus.jsm.streams.info(Streams.events);
    expect(info.config.deny_delete).toBe(true);
    expect(info.config.deny_purge).toBe(true);
    expect(info.config.storage).toBe('file');
  });

  it('appends at the head and refuses a stale head', async () => {
    const first = await bus.store.append({
      aggregate: 'job',
      aggregateId: 'j1',
      head: EMPTY_HEAD,
      events: [submitted],
      meta: meta(),
    });
    expect(first.head.seq).toBeGreaterThan(0);
    await expect(
      bus.store.append({
        aggregate: 'job',
        aggregateId: 'j1',
        head: EMPTY_HEAD,
        events: [submitted],
        meta: meta(),
      }),
    ).rejects.toBeInstanceOf(ConcurrencyError);
    const loaded = await bus.store.load('job', 'j1');
    expect(loaded.events.map((e) => e.type)).toEqual(['JobSubmitted']);
    expect(loaded.head).toEqual(first.head);
  });

  it('de-duplicates a retried append by its event id', async () => {
    const input = {
      aggregate: 'job' as const,
      aggregateId: 'j2',
      head: EMPTY_HEAD,
      events: [submitted],
      meta: meta(),
      ids: ['fixed-id-1'],
    };
    const a = await bus.store.append(input);
    const b = await bus.store.append(input);
    expect(b.head.seq).toBe(a.head.seq);
    expect((await bus.store.load('job', 'j2')).events).toHaveLength(1);
  });

  it('rejects an event that does not match its schema, naming the field', async () => {
    const bad = {
      type: 'JobSubmitted',
      data: { owner: 'a', spec: { name: '', command: 'x', resources: { gpus: -1 } } },
    };
    await expect(
      bus.store.append({
        aggregate: 'job',
        aggregateId: 'j3',
        head: EMPTY_HEAD,
        events: [bad as JobEvent],
        meta: meta(),
      }),
    ).rejects.toThrow(/gpus/);
    expect((await bus.store.load('job', 'j3')).events).toEqual([]);
  });

  it('chains hashes per aggregate and replays the log in order', async () => {
    let head = (await bus.store.load('job', 'j1')).head;
    for (let i = 0; i < 3; i++) {
      ({ head } = await bus.store.append({
        aggregate: 'job',
        aggregateId: 'j1',
        head,
        events: [{ type: 'JobCancelled', data: {} }],
        meta: meta(),
      }));
    }
    const verifier = new ChainVerifier();
    const seqs: number[] = [];
    for await (const e of bus.store.replay()) {
      verifier.add(e);
      seqs.push(e.seq);
    }
    expect(verifier.breaks).toEqual([]);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(seqs.length).toBe(await bus.store.lastSeq());
  });
});
