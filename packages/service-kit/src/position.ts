import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { retryTransient } from '@trainyard/events';
import { openBucket } from './buckets.ts';

/** The bucket of saved log positions. */
export const openPositionBucket = (js: JetStreamClient, replicas = 1) =>
  openBucket(js, 'ty_positions', { history: 1, replicas });

/**
 * Where a reader of the log has got to: the highest sequence below which every event's effect
 * is durable. Kept in a KV bucket, so a reader that restarts resumes there and handles again
 * at most what was in flight (its handling must be idempotent).
 */
export class LogPosition {
  readonly #inflight = new Set<number>();
  #seen = 0;
  #saved = 0;

  private constructor(
    private readonly kv: KV,
    readonly name: string,
  ) {}

  static async open(js: JetStreamClient, name: string, replicas = 1): Promise<LogPosition> {
    const kv = await openPositionBucket(js, replicas);
    const position = new LogPosition(kv, name);
    const entry = await retryTransient(`read the position of ${name}`, () => kv.get(name));
    position.#saved = entry?.operation === 'PUT' ? Number(entry.string()) : 0;
    position.#seen = position.#saved;
    return position;
  }

  /**
   * The first sequence to read: after the saved position when the process starts, after the
   * last event read when its reader is started again within the process.
   */
  get resumeAt(): number {
    return this.#seen + 1;
  }

  /** Records an event as read; `pending` marks one whose effect is still being made. */
  read(seq: number, pending = false): void {
    this.#seen = Math.max(this.#seen, seq);
    if (pending) this.#inflight.add(seq);
  }

  done(seq: number): void {
    this.#inflight.delete(seq);
  }

  /** The highest sequence at or below which nothing is in flight. */
  get safe(): number {
    return this.#inflight.size === 0 ? this.#seen : Math.min(...this.#inflight) - 1;
  }

  /** Saves the safe position if it moved. */
  async save(): Promise<void> {
    const safe = this.safe;
    if (safe <= this.#saved) return;
    await retryTransient(`save the position of ${this.name}`, () =>
      this.kv.put(this.name, String(safe)),
    );
    this.#saved = safe;
  }
}
