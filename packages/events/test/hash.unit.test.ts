import { describe, expect, it } from 'vitest';
import {
  canonicalJson,
  ChainVerifier,
  GENESIS_HASH,
  hashEvent,
  type StoredEvent,
} from '../src/index.ts';

function chain(n: number): StoredEvent[] {
  const events: StoredEvent[] = [];
  let prev = GENESIS_HASH;
  for (let i = 1; i <= n; i++) {
    const body = {
      id: `e${i}`,
      type: 'UserCreated',
      schemaVersion: 1,
      aggregate: 'user',
      aggregateId: 'alice',
      occurredAt: '2026-01-01T00:00:00.000Z',
      actor: { kind: 'service', id: 't' },
      correlationId: 'c',
      causationId: null,
      prevHash: prev,
      data: { username: 'alice', role: 'user' },
    } as const;
    const hash = hashEvent(body as never);
    events.push({ ...body, hash, seq: i } as unknown as StoredEvent);
    prev = hash;
  }
  return events;
}

describe('hash chain', () => {
  it('serialises keys in a fixed order', () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { f: 1, e: 0 }], c: null } })).toBe(
      '{"a":{"c":null,"d":[2,{"e":0,"f":1}]},"b":1}',
    );
  });

  it('verifies an intact chain', () => {
    const v = new ChainVerifier();
    chain(5).forEach((e) => v.add(e));
    expect(v.breaks).toEqual([]);
    expect(v.count).toBe(5);
    expect(v.aggregates).toBe(1);
  });

  it('finds an event whose data was changed, and every link after a removed one', () => {
    const tampered = chain(4);
    (tampered[1]!.data as { role: string }).role = 'admin';
    const v = new ChainVerifier();
    tampered.forEach((e) => v.add(e));
    expect(v.breaks).toEqual([
      { aggregate: 'user', aggregateId: 'alice', eventId: 'e2', seq: 2, problem: 'hash-mismatch' },
    ]);

    const gap = chain(4).filter((e) => e.seq !== 2);
    const v2 = new ChainVerifier();
    gap.forEach((e) => v2.add(e));
    expect(v2.breaks.map((b) => [b.seq, b.problem])).toEqual([[3, 'prev-hash-mismatch']]);
  });

  it('tells two events accepted at one position (a fork) from a missing link', () => {
    const [first, second] = chain(2) as [StoredEvent, StoredEvent];
    const rival = { ...second, id: 'rival', seq: 3 };
    rival.hash = hashEvent(rival);
    expect(rival.prevHash).toBe(first.hash);
    const v = new ChainVerifier();
    [first, second, rival].forEach((e) => v.add(e));
    expect(v.breaks.map((b) => [b.seq, b.problem])).toEqual([[3, 'fork']]);
  });
});
