import { Subjects, type StoredEvent } from '@trainyard/events';
import type { FollowOptions } from './follow.ts';

export type OnEvent = (event: StoredEvent) => void | Promise<void>;

/** Whether a NATS subject filter (`*` one token, `>` the rest) takes `subject`. */
export function subjectMatches(filter: string, subject: string): boolean {
  return tokensMatch(filter.split('.'), subject);
}

/** `subjectMatches`, for a filter already split into its tokens. */
function tokensMatch(want: string[], subject: string): boolean {
  const have = subject.split('.');
  for (let i = 0; i < want.length; i++) {
    if (want[i] === '>') return have.length > i;
    if (i >= have.length || (want[i] !== '*' && want[i] !== have[i])) return false;
  }
  return want.length === have.length;
}

/** One service following the log: its own position, handler and queue. */
export class Follower {
  next: number;
  /** Its own reader while it is behind the shared one; null while it rides the shared one. */
  alone: AbortController | null = null;
  readonly #queue: StoredEvent[] = [];
  #busy: Promise<void> | null = null;
  #caughtUp = false;
  #drained: (() => void)[] = [];
  #ending = false;
  #settled = false;
  /** Its subject filter's tokens, split once. */
  readonly #filter: string[] | null;

  constructor(
    readonly opts: FollowOptions,
    readonly limit: number,
    private readonly onEvent: OnEvent,
    /** Takes the follower off every reader, as it begins to end. */
    private readonly leave: () => void,
    private readonly settle: (err?: unknown) => void,
  ) {
    this.next = opts.fromSeq;
    this.#filter = opts.filter?.split('.') ?? null;
  }

  get ending(): boolean {
    return this.#ending;
  }

  /** Whether `event` is one for this follower, which then counts it as read. */
  wants(event: StoredEvent): boolean {
    if (this.#ending || event.seq < this.next) return false;
    this.next = event.seq + 1;
    const want = this.#filter;
    return !want || tokensMatch(want, Subjects.event(event.aggregate, event.aggregateId));
  }

  get backlog(): number {
    return this.#queue.length;
  }

  /** Hands `event` to the handler now, or after those before it. */
  deliver(event: StoredEvent): void {
    if (this.#ending) return;
    this.#caughtUp = false;
    if (this.#busy || this.#queue.length > 0) this.#queue.push(event);
    else this.#run(event);
  }

  /** Resolves once the follower holds under half its backlog, or ends. */
  drained(): Promise<void> {
    if (this.#queue.length < this.limit / 2 || this.#ending) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  /** Forgets the events it holds unhandled: it reads them again from its own position. */
  dropBacklog(): void {
    const first = this.#queue[0];
    if (first) this.next = first.seq;
    this.#queue.length = 0;
    this.#release();
  }

  /** The reader has read all there was: said once this follower has handled it all. */
  caughtUp(): void {
    this.#caughtUp = true;
    this.#drain();
  }

  /** Ends the follow once the handler in progress has settled, with `err` if one is given. */
  end(err?: unknown): void {
    if (!this.#ending) {
      this.#ending = true;
      this.#queue.length = 0;
      this.#release();
      this.leave();
    }
    if (!this.#busy) return this.#settle(err);
    void this.#busy.then(() => this.#settle(err));
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
    if (this.#queue.length < this.limit / 2) this.#release();
    if (this.#busy || this.#queue.length > 0 || !this.#caughtUp || this.#ending) return;
    this.#caughtUp = false;
    try {
      this.opts.onCaughtUp?.();
    } catch (err) {
      this.end(err);
    }
  }

  #release(): void {
    for (const resolve of this.#drained.splice(0)) resolve();
  }
}
