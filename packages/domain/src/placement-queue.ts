import type { Candidate } from './candidates.ts';

/**
 * A queue of candidates as a placement round walks it, in placement order, and the merge of
 * ordered streams of them (`waiting.ts` keeps a stream for each family of waiting work).
 */

/** The queue as one round walks it: what `placeInOrder` reads. */
export interface PlacementQueue {
  /** The next candidate in placement order; undefined once none is left. */
  next(): Candidate | undefined;
  /**
   * Passes over a candidate, and every later one of its family, when this holds of it. It may
   * read only what a family's candidates share: their shape (and its mark), their time limit and
   * whether they probe.
   */
  skip: ((c: Candidate) => boolean) | null;
}

/**
 * Candidates in placement order, one at a time: its head, with the aged priority and `queuedSeq`
 * it is ordered by.
 */
export interface Stream {
  head: { candidate: Candidate } | null;
  priority: number;
  seq: number;
  /** Moves to its next candidate; `head` is null once none is left. */
  advance(): void;
}

/** Whether `a`'s next candidate comes before `b`'s: higher aged priority, then queued first. */
function before(a: Stream, b: Stream): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
}

/** Streams merged, by their next candidates, in a binary heap. */
export class MergedQueue implements PlacementQueue {
  skip: ((c: Candidate) => boolean) | null = null;
  readonly #heap: Stream[];
  /** The stream whose candidate was handed out last: it goes back in when the next is asked for. */
  #out: Stream | null = null;

  constructor(streams: Stream[]) {
    this.#heap = streams;
    for (let i = (streams.length >> 1) - 1; i >= 0; i--) this.#down(i);
  }

  next(): Candidate | undefined {
    const out = this.#out;
    this.#out = null;
    if (out) {
      out.advance();
      if (out.head && !this.skip?.(out.head.candidate)) this.#push(out);
    }
    while (this.#heap.length > 0) {
      const top = this.#pop();
      if (this.skip?.(top.head!.candidate)) continue;
      this.#out = top;
      return top.head!.candidate;
    }
    return undefined;
  }

  #push(c: Stream): void {
    const heap = this.#heap;
    let i = heap.push(c) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(c, heap[parent]!)) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = c;
  }

  #pop(): Stream {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      this.#down(0);
    }
    return top;
  }

  #down(i: number): void {
    const heap = this.#heap;
    const c = heap[i]!;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= heap.length) break;
      if (child + 1 < heap.length && before(heap[child + 1]!, heap[child]!)) child++;
      if (!before(heap[child]!, c)) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = c;
  }
}

/** A queue's candidates, as its `skip` lets them through, for a `for…of` loop. */
export function* drain(queue: PlacementQueue): Generator<Candidate, void, undefined> {
  for (let c = queue.next(); c; c = queue.next()) yield c;
}

/** A queue of candidates already in placement order. */
export function listQueue(list: readonly Candidate[]): PlacementQueue {
  let i = 0;
  const queue: PlacementQueue = {
    skip: null,
    next() {
      while (i < list.length) {
        const c = list[i++]!;
        if (!queue.skip?.(c)) return c;
      }
      return undefined;
    },
  };
  return queue;
}
