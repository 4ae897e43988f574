import type { StoredEvent } from './envelope.ts';

/** An aggregate's events as the log held them, oldest first, and their size in the log. */
export interface History {
  readonly events: readonly StoredEvent[];
  readonly bytes: number;
}

/**
 * The histories of the aggregates read from or appended to the log in this process, so that
 * reading one again reads only what the log holds beyond them. A history is a prefix of what the
 * log held; the store uses it only where the log's own chain goes on from its last event (the
 * same sequence and hash, or a next event whose `prevHash` is that hash), so a history from
 * another log, or one the log has since left behind, is never taken for this log's. The least
 * recently used go first once the histories pass `maxBytes` or `maxAggregates`.
 */
export class Histories {
  readonly #kept = new Map<string, History>();
  #bytes = 0;

  constructor(
    readonly maxBytes = 32 * 1024 ** 2,
    readonly maxAggregates = 20_000,
  ) {}

  /** The history kept for a subject, now the most recently used. */
  get(subject: string): History | undefined {
    const history = this.#kept.get(subject);
    if (history) {
      this.#kept.delete(subject);
      this.#kept.set(subject, history);
    }
    return history;
  }

  keep(subject: string, history: History): void {
    this.forget(subject);
    if (history.bytes > this.maxBytes) return;
    this.#kept.set(subject, history);
    this.#bytes += history.bytes;
    for (const [oldest, { bytes }] of this.#kept) {
      if (this.#bytes <= this.maxBytes && this.#kept.size <= this.maxAggregates) break;
      this.#kept.delete(oldest);
      this.#bytes -= bytes;
    }
  }

  forget(subject: string): void {
    const history = this.#kept.get(subject);
    if (!history) return;
    this.#kept.delete(subject);
    this.#bytes -= history.bytes;
  }

  get size(): number {
    return this.#kept.size;
  }
}

/** The histories every event store of this process shares. */
export const processHistories = new Histories();
