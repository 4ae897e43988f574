import { Subjects, type EventStore, type StoredEvent } from '@trainyard/events';
import { followLog, type FollowOptions } from './follow.ts';
import { onAbort } from './lifecycle.ts';

export type OnEvent = (event: StoredEvent) => void | Promise<void>;

/** Events a follower may hold unhandled before the reader waits for it. */
const BACKLOG = 4096;

/** Whether a NATS subject filter (`*` one token, `>` the rest) takes `subject`. */
export function subjectMatches(filter: string, subject: string): boolean {
  const want = filter.split('.');
  const have = subject.split('.');
  for (let i = 0; i < want.length; i++) {
    if (want[i] === '>') return have.length > i;
    if (i >= have.length || (want[i] !== '*' && want[i] !== have[i])) return false;
  }
  return want.length === have.length;
}

/** One service following the log: its own position, handler and queue. */
class Follower {
  next: number;
  readonly #queue: StoredEvent[] = [];
  #busy: Promise<void> | null = null;
  #caughtUp = false;
  #drained: (() => void)[] = [];
  #ending = false;
  #settled = false;

  constructor(
    readonly opts: FollowOptions,
    private readonly onEvent: OnEvent,
    private readonly settle: (err?: unknown) => void,
  ) {
    this.next = opts.fromSeq;
  }

  wants(event: StoredEvent): boolean {
    if (event.seq < this.next) return false;
    this.next = event.seq + 1;
    const { filter } = this.opts;
    return !filter || subjectMatches(filter, Subjects.event(event.aggregate, event.aggregateId));
  }

  get backlog(): number {
    return this.#queue.length;
  }

  /** Hands `event` to the handler now, or after those before it. */
  deliver(event: StoredEvent): void {
    this.#caughtUp = false;
    if (this.#busy || this.#queue.length > 0) this.#queue.push(event);
    else this.#run(event);
  }

  /** Resolves once the follower holds fewer than half its backlog. */
  drained(): Promise<void> {
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  /** The reader has read all there was: said once this follower has handled it all. */
  caughtUp(): void {
    this.#caughtUp = true;
    this.#drain();
  }

  /** Ends the follow: at once on an error, else once the handler in progress has settled. */
  end(err?: unknown): void {
    this.#ending = true;
    this.#queue.length = 0;
    this.#releaseReader();
    if (err !== undefined || !this.#busy) return this.#settle(err);
    void this.#busy.then(() => this.#settle());
  }

  #settle(err?: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    this.settle(err);
  }

  #run(event: StoredEvent): void {
    let handled: void | Promise<void>;
    try {
      handled = this.onEvent(event);
    } catch (err) {
      this.end(err);
      return;
    }
    if (!handled) return;
    this.#busy = handled.then(
      () => {
        this.#busy = null;
        this.#drain();
      },
      (err: unknown) => {
        this.#busy = null;
        this.end(err);
      },
    );
  }

  #drain(): void {
    while (!this.#busy && !this.#ending && this.#queue.length > 0) this.#run(this.#queue.shift()!);
    if (this.#queue.length < BACKLOG / 2) this.#releaseReader();
    if (this.#busy || this.#queue.length > 0 || !this.#caughtUp || this.#ending) return;
    this.#caughtUp = false;
    this.opts.onCaughtUp?.();
  }

  #releaseReader(): void {
    for (const resolve of this.#drained.splice(0)) resolve();
  }
}

/** How a reader ended: aborted (no follower left, or to read again), stalled, or failed. */
type Outcome = 'aborted' | 'stall' | 'miscount' | { error: unknown };

interface Reader {
  abort: AbortController;
  /** The next sequence it hands out. */
  next: number;
  filter: string | undefined;
  caughtUp: boolean;
}

/**
 * One reader of the event log for every service of a process that follows it. `follow` behaves
 * as `followLog` does for each of them: events in order from the follower's own `fromSeq`,
 * filtered by its own subject filter, `onCaughtUp` once it has handled all there was, and it
 * returns on its signal, or after `onStall` / `onMiscount` when the shared reader stalled or
 * miscounted, for the follower to start again from its own position, as it would alone. A
 * follower's handler runs on its own queue, so a slow one (the projector writing a batch) holds
 * the others back only once it is a backlog behind. A follower that starts behind the reader
 * makes it read again from there; those ahead skip what they have had.
 */
export class SharedLog {
  readonly #followers = new Set<Follower>();
  #reader: Reader | null = null;
  #rewind = false;

  constructor(private readonly store: EventStore) {}

  follow(opts: FollowOptions, onEvent: OnEvent): Promise<void> {
    if (opts.signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const follower: Follower = new Follower(opts, onEvent, (err) => {
        forgetAbort();
        this.#followers.delete(follower);
        if (this.#followers.size === 0) this.#reader?.abort.abort();
        if (err === undefined) resolve();
        else reject(err instanceof Error ? err : new Error(String(err)));
      });
      const forgetAbort = onAbort(opts.signal, () => follower.end());
      this.#followers.add(follower);
      this.#admit(follower);
    });
  }

  #admit(follower: Follower): void {
    const reader = this.#reader;
    if (!reader) return this.#start();
    const { filter } = follower.opts;
    const misfit = reader.filter !== undefined && reader.filter !== filter;
    if (reader.abort.signal.aborted || follower.next < reader.next || misfit) {
      this.#rewind = true;
      reader.abort.abort();
      return;
    }
    if (reader.caughtUp) {
      queueMicrotask(() => {
        if (this.#reader === reader && reader.caughtUp) follower.caughtUp();
      });
    }
  }

  #start(): void {
    const followers = [...this.#followers];
    const fromSeq = Math.min(...followers.map((f) => f.next));
    const filters = new Set(followers.map((f) => f.opts.filter));
    const filter = filters.size === 1 ? [...filters][0] : undefined;
    const reader: Reader = { abort: new AbortController(), next: fromSeq, filter, caughtUp: false };
    this.#reader = reader;
    let ended: Outcome = 'aborted';
    const least = (pick: (o: FollowOptions) => number | undefined) => {
      const given = followers.map((f) => pick(f.opts)).filter((v) => v !== undefined);
      return given.length > 0 ? Math.min(...given) : undefined;
    };
    const stallMs = least((o) => o.stallMs);
    const quietMs = least((o) => o.quietMs);
    const maxMessages = Math.max(0, ...followers.map((f) => f.opts.maxMessages ?? 0));
    followLog(
      this.store,
      {
        fromSeq,
        ...(filter && { filter }),
        ...(maxMessages > 0 && { maxMessages }),
        signal: reader.abort.signal,
        ...(stallMs !== undefined && { stallMs }),
        ...(quietMs !== undefined && { quietMs }),
        onStall: () => (ended = 'stall'),
        onMiscount: () => (ended = 'miscount'),
        onCaughtUp: () => {
          reader.caughtUp = true;
          for (const f of this.#followers) f.caughtUp();
        },
      },
      (event) => {
        reader.next = event.seq + 1;
        reader.caughtUp = false;
        return this.#deliver(event);
      },
    ).then(
      () => this.#ended(reader, ended),
      (error: unknown) => this.#ended(reader, { error }),
    );
  }

  #deliver(event: StoredEvent): Promise<void> | undefined {
    let waits: Promise<void>[] | undefined;
    for (const f of this.#followers) {
      if (!f.wants(event)) continue;
      f.deliver(event);
      if (f.backlog >= BACKLOG) (waits ??= []).push(f.drained());
    }
    return waits && Promise.all(waits).then(() => undefined);
  }

  #ended(reader: Reader, outcome: Outcome): void {
    if (this.#reader !== reader) return;
    this.#reader = null;
    if (this.#rewind) {
      this.#rewind = false;
      if (this.#followers.size > 0) this.#start();
      return;
    }
    for (const f of [...this.#followers]) {
      if (outcome === 'stall') f.opts.onStall?.(f.next - 1);
      if (outcome === 'miscount') f.opts.onMiscount?.(f.next - 1);
      f.end(typeof outcome === 'object' ? outcome.error : undefined);
    }
  }
}
