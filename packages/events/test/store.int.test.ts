import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JetStreamManager } from '@nats-io/jetstream';
import { connectBus, type Bus } from '@trainyard/service-kit';
import { jobSubmitted, startTestNats, testMeta } from '@trainyard/testkit';
import {
  ChainVerifier,
  ConcurrencyError,
  EMPTY_HEAD,
  EventStore,
  Histories,
  Streams,
  Subjects,
  type AggregateHead,
  type JobEvent,
  type StoredEvent,
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

describe('what a process read or appended of an aggregate', () => {
  /** A store of its own histories, and how many messages it has asked the server for. */
  const counted = () => {
    const reads = { n: 0 };
    const jsm = {
      streams: {
        getMessage: (...args: Parameters<JetStreamManager['streams']['getMessage']>) => {
          reads.n++;
          return bus.jsm.streams.getMessage(...args);
        },
      },
    } as unknown as JetStreamManager;
    const histories = new Histories();
    return { store: new EventStore(bus.js, jsm, null, histories), histories, reads };
  };
  const cancelled: JobEvent = { type: 'JobCancelled', data: {} };
  const appendTo = (store: EventStore, id: string, head: AggregateHead, n: number) =>
    store.append({
      aggregate: 'job',
      aggregateId: id,
      head,
      events: Array(n).fill(cancelled),
      meta: meta(),
    });
  const fresh = async (id: string) => (await counted().store.load('job', id)).events;

  it('is not read again: a load reads the newest event and only what the log holds beyond it', async () => {
    const writer = counted();
    let { head } = await appendTo(writer.store, 'h1', EMPTY_HEAD, 3);
    const reader = counted();
    expect((await reader.store.load('job', 'h1')).events).toHaveLength(3);
    expect(reader.reads.n).toBe(3);
    ({ head } = await appendTo(writer.store, 'h1', head, 2));
    reader.reads.n = 0;
    const again = await reader.store.load('job', 'h1');
    expect(reader.reads.n).toBe(2);
    expect(again.head).toEqual(head);
    expect(again.events).toEqual(await fresh('h1'));
    reader.reads.n = 0;
    expect((await reader.store.load('job', 'h1')).events).toEqual(again.events);
    expect(reader.reads.n).toBe(1);

    ({ head } = await appendTo(reader.store, 'h1', head, 1));
    reader.reads.n = 0;
    const appended = await reader.store.load('job', 'h1');
    expect(reader.reads.n).toBe(1);
    expect(appended.head).toEqual(head);
    expect(appended.events).toEqual(await fresh('h1'));
    writer.reads.n = 0;
    expect((await writer.store.load('job', 'h1')).events).toEqual(appended.events);
    expect(writer.reads.n).toBe(1);
  });

  it('is read from the log where an event id landed before, as another envelope', async () => {
    const input = {
      aggregate: 'job' as const,
      aggregateId: 'h3',
      head: EMPTY_HEAD,
      events: [submitted],
      meta: meta(),
      ids: ['fixed-h3'],
    };
    const { store } = counted();
    await store.append(input);
    const again = await store.append({ ...input, meta: { ...meta(), correlationId: 'another' } });
    await store.append({ ...input, ids: ['after-h3'], head: again.head, events: [cancelled] });
    const log = await fresh('h3');
    expect(log[0]!.correlationId).not.toBe('another');
    expect((await store.load('job', 'h3')).events).toEqual(log);
  });

  it('is read afresh where the log does not go on from it: another log, or a log it is ahead of', async () => {
    await appendTo(counted().store, 'h2', EMPTY_HEAD, 3);
    const log = await fresh('h2');
    const other = (e: StoredEvent, seq: number): StoredEvent => ({
      ...e,
      seq,
      hash: `other-${seq}`,
    });
    const subject = Subjects.event('job', 'h2');
    // Each with the reads it takes: the newest event, then (for a history behind the log) the
    // events after it, whose chain does not go on from it, then the whole walk.
    const notOurs: [StoredEvent[], number][] = [
      [[other(log[0]!, log[0]!.seq)], 1 + 1 + 2],
      [[other(log[0]!, log[0]!.seq), other(log[2]!, log[2]!.seq)], 1 + 2],
      [[...log, other(log[2]!, log[2]!.seq + 5)], 1 + 2],
    ];
    for (const [events, expectedReads] of notOurs) {
      const { store, histories, reads } = counted();
      histories.keep(subject, { events, bytes: 100 });
      expect((await store.load('job', 'h2')).events).toEqual(log);
      expect(reads.n).toBe(expectedReads);
      expect(histories.get(subject)?.events).toEqual(log);
    }
  });
});
