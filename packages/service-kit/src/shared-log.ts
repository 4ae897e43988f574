import type { EventStore } from '@trainyard/events';
import { followLog, type FollowOptions } from './follow.ts';
import { Follower, type OnEvent } from './follower.ts';
import { onAbort } from './lifecycle.ts';

export { subjectMatches, type OnEvent } from './follower.ts';

/** Events a follower may hold unhandled before it leaves the shared reader for one of its own. */
export const FOLLOWER_BACKLOG = 4096;

export interface SharedLogOptions {
  /** Events a follower may hold unhandled (default `FOLLOWER_BACKLOG`). */
  backlog?: number;
}

/** How a reader ended: aborted, stalled, miscounted, or failed. */
type Outcome = 'aborted' | 'stall' | 'miscount' | { error: unknown };

interface Reader {
  abort: AbortController;
  /** The next sequence it hands out. */
  next: number;
  filter: string | undefined;
  caughtUp: boolean;
}

/** The options of a reader serving `followers`: the least waits, the largest batch. */
function readerOptions(
  followers: Follower[],
): Pick<FollowOptions, 'stallMs' | 'quietMs' | 'maxMessages'> {
  const pick = (take: (o: FollowOptions) => number | undefined) =>
    followers.map((f) => take(f.opts)).filter((v) => v !== undefined);
  const stall = pick((o) => o.stallMs);
  const quiet = pick((o) => o.quietMs);
  const batch = pick((o) => o.maxMessages);
  return {
    ...(stall.length > 0 && { stallMs: Math.min(...stall) }),
    ...(quiet.length > 0 && { quietMs: Math.min(...quiet) }),
    ...(batch.length > 0 && { maxMessages: Math.max(...batch) }),
  };
}

/**
 * One reader of the event log for every service of a process that follows it. `follow` behaves
 * as `followLog` does for each of them: events in order from the follower's own `fromSeq`,
 * through its own subject filter; `onCaughtUp` once it has handled all there was; and it
 * returns on its signal, or after `onStall` / `onMiscount` when its reader stalled or
 * miscounted, for the follower to start again from its own position, as it would alone.
 *
 * Followers at the shared reader's position ride it. Each handles its events on a queue of its
 * own, and the shared reader never waits for one: a follower that starts behind it, or falls
 * `FOLLOWER_BACKLOG` events behind (a projector while PostgreSQL is away), reads on a reader of
 * its own, through its own filter and at its own pace, and rides the shared one again once it
 * has caught up. So one slow service never holds back another (the scheduler keeps placing jobs
 * while the projector waits), and no follower holds more than its backlog in memory. When every
 * rider takes one filter (a watchdog run alone), the filter goes to the server. A reader that is
 * stopped may still yield what it had fetched: each hands out nothing once it is aborted.
 */
export class SharedLog {
  readonly #followers = new Set<Follower>();
  readonly #riders = new Set<Follower>();
  #reader: Reader | null = null;
  #restart = false;
  readonly #backlog: number;

  constructor(
    private readonly store: EventStore,
    opts: SharedLogOptions = {},
  ) {
    this.#backlog = opts.backlog ?? FOLLOWER_BACKLOG;
  }

  follow(opts: FollowOptions, onEvent: OnEvent): Promise<void> {
    if (opts.signal.aborted) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const follower: Follower = new Follower(
        opts,
        this.#backlog,
        onEvent,
        () => {
          this.#unride(follower);
          follower.alone?.abort();
          follower.alone = null;
        },
        (err) => {
          forgetAbort();
          this.#followers.delete(follower);
          if (err === undefined) resolve();
          else reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
      const forgetAbort = onAbort(opts.signal, () => follower.end());
      this.#followers.add(follower);
      this.#admit(follower);
    });
  }

  /** Puts a follower on the shared reader if it is at its position, else on a reader of its own. */
  #admit(follower: Follower): void {
    if (follower.ending) return;
    const reader = this.#reader;
    if (reader && follower.next < reader.next) return this.#readAlone(follower);
    this.#riders.add(follower);
    if (!reader) return this.#start();
    const { filter } = follower.opts;
    if (reader.abort.signal.aborted || (reader.filter !== undefined && reader.filter !== filter)) {
      this.#restart = true;
      reader.abort.abort();
      return;
    }
    if (reader.caughtUp) {
      queueMicrotask(() => {
        if (this.#reader === reader && reader.caughtUp && this.#riders.has(follower)) {
          follower.caughtUp();
        }
      });
    }
  }

  #unride(follower: Follower): void {
    if (!this.#riders.delete(follower) || this.#riders.size > 0) return;
    this.#reader?.abort.abort();
  }

  #start(): void {
    const riders = [...this.#riders];
    const fromSeq = Math.min(...riders.map((f) => f.next));
    const filters = new Set(riders.map((f) => f.opts.filter));
    const filter = filters.size === 1 ? [...filters][0] : undefined;
    const reader: Reader = { abort: new AbortController(), next: fromSeq, filter, caughtUp: false };
    this.#reader = reader;
    const { signal } = reader.abort;
    const caughtUp = () => {
      reader.caughtUp = true;
      for (const f of this.#riders) f.caughtUp();
    };
    let outcome: Outcome = 'aborted';
    followLog(
      this.store,
      {
        fromSeq,
        ...(filter && { filter }),
        ...readerOptions(riders),
        signal,
        onStall: () => (outcome = 'stall'),
        onMiscount: () => (outcome = 'miscount'),
        onCaughtUp: () => {
          if (!signal.aborted) caughtUp();
        },
      },
      (event) => {
        if (signal.aborted) return;
        reader.next = event.seq + 1;
        reader.caughtUp = false;
        for (const f of this.#riders) {
          if (!f.wants(event)) continue;
          f.deliver(event);
          if (f.backlog >= f.limit) this.#fallBehind(f);
        }
      },
    ).then(
      () => this.#ended(reader, outcome),
      (error: unknown) => this.#ended(reader, { error }),
    );
  }

  /** A rider too far behind reads the rest alone, from the first event it had not handled. */
  #fallBehind(follower: Follower): void {
    this.#unride(follower);
    follower.dropBacklog();
    this.#readAlone(follower);
  }

  /**
   * Reads for one follower alone, through its filter, until it has reached the shared reader's
   * position, then lets it ride again. Past the shared reader's position, it rides at once; on
   * catching up short of it, it rides once the log holds nothing for it in between.
   */
  #readAlone(follower: Follower): void {
    if (follower.ending) return;
    const alone = new AbortController();
    follower.alone = alone;
    const { signal } = alone;
    const { filter } = follower.opts;
    const current = () => follower.alone === alone && !signal.aborted && !follower.ending;
    const ride = () => {
      alone.abort();
      follower.alone = null;
      this.#admit(follower);
    };
    const settled = () => follower.backlog < follower.limit / 2;
    const reached = () => {
      const reader = this.#reader;
      return !reader || (follower.next >= reader.next && !reader.abort.signal.aborted);
    };
    let outcome: Outcome = 'aborted';
    followLog(
      this.store,
      {
        fromSeq: follower.next,
        ...(filter && { filter }),
        ...readerOptions([follower]),
        signal,
        onStall: () => (outcome = 'stall'),
        onMiscount: () => (outcome = 'miscount'),
        onCaughtUp: () => {
          if (!current() || !settled()) return;
          if (reached()) return ride();
          const reader = this.#reader!;
          const at = reader.next;
          this.store
            .hasAfter(follower.next - 1, filter)
            .then((more) => {
              if (more || !current() || this.#reader !== reader || reader.next !== at) return;
              follower.next = at;
              ride();
            })
            .catch(() => undefined);
        },
      },
      (event) => {
        if (!current()) return;
        if (follower.wants(event)) follower.deliver(event);
        if (current() && settled() && reached()) return ride();
        if (current() && follower.backlog >= follower.limit) return follower.drained();
      },
    ).then(
      () => this.#aloneEnded(follower, alone, outcome),
      (error: unknown) => this.#aloneEnded(follower, alone, { error }),
    );
  }

  #aloneEnded(follower: Follower, alone: AbortController, outcome: Outcome): void {
    if (follower.alone !== alone) return;
    follower.alone = null;
    if (!follower.ending) this.#endFollower(follower, outcome);
  }

  #ended(reader: Reader, outcome: Outcome): void {
    if (this.#reader !== reader) return;
    this.#reader = null;
    if (this.#restart) {
      this.#restart = false;
      if (this.#riders.size > 0) this.#start();
      return;
    }
    for (const f of [...this.#riders]) this.#endFollower(f, outcome);
  }

  #endFollower(f: Follower, outcome: Outcome): void {
    if (outcome === 'stall') f.opts.onStall?.(f.next - 1);
    if (outcome === 'miscount') f.opts.onMiscount?.(f.next - 1);
    f.end(typeof outcome === 'object' ? outcome.error : undefined);
  }
}
