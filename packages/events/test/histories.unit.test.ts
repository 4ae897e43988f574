import { describe, expect, it } from 'vitest';
import { Histories, type StoredEvent } from '../src/index.ts';

const history = (seq: number, bytes: number) => ({
  events: [{ seq, hash: `h${seq}` } as StoredEvent],
  bytes,
});

describe('the histories a process keeps', () => {
  it('lets the least recently used go once there are more aggregates than it keeps', () => {
    const histories = new Histories(1_000, 2);
    histories.keep('a', history(1, 10));
    histories.keep('b', history(2, 10));
    expect(histories.get('a')?.events[0]?.seq).toBe(1);
    histories.keep('c', history(3, 10));
    expect(histories.get('b')).toBeUndefined();
    expect(histories.get('a')).toBeDefined();
    expect(histories.get('c')).toBeDefined();
    expect(histories.size).toBe(2);
  });

  it('lets the least recently used go once their size passes its bound, and keeps none too large', () => {
    const histories = new Histories(100, 10);
    histories.keep('a', history(1, 40));
    histories.keep('b', history(2, 40));
    histories.keep('a', history(4, 50));
    histories.keep('c', history(3, 40));
    expect(histories.get('b')).toBeUndefined();
    expect(histories.get('a')?.events[0]?.seq).toBe(4);
    histories.keep('d', history(5, 101));
    expect(histories.get('d')).toBeUndefined();
    expect(histories.size).toBe(2);
    histories.forget('a');
    histories.keep('e', history(6, 60));
    expect([histories.get('c'), histories.get('e')].map((h) => h?.events[0]?.seq)).toEqual([3, 6]);
  });
});
