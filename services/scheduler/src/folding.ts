import { emptyCluster, evolveCluster, type ClusterState } from '@trainyard/domain';
import type { StoredEvent } from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';
import { loadSnapshot, saveSnapshot } from './snapshot.ts';

/**
 * How long a stopping scheduler gives its last snapshot. The snapshot only saves the next leader
 * some replay, and a store that is away would otherwise hold the stop for the full deadline.
 */
const FINAL_SNAPSHOT_DEADLINE_MS = 3_000;

/** What the fold tells the term it runs for. */
export interface FoldListener {
  /** The state holds the whole log, for the first time this term. */
  caughtUp(): void;
  /** The reader has read all there was again, after the first time. */
  atEnd(): void;
  /** An event read after catching up, already folded into the state. */
  live(event: StoredEvent): void;
}

/**
 * One term's cluster state: starts from the latest snapshot, folds the rest of the log into it
 * in order, writes a snapshot every `snapshotEveryEvents` events and a last one as the term
 * ends, and says when the state first holds the whole log.
 */
export class Folding {
  cluster: ClusterState = emptyCluster();
  /** The sequence the fold started from, once the snapshot is loaded: 1 without one. */
  startSeq = 0;
  #snapshotSeq = 0;
  #snapshotting = false;
  #caughtUp = false;

  constructor(
    private readonly ctx: ServiceContext,
    private readonly snapshotEveryEvents: number,
    private readonly signal: AbortSignal,
    private readonly listener: FoldListener,
  ) {}

  /** Whether the state has caught up with the log, in a term that has not ended. */
  get isCaughtUp(): boolean {
    return this.#caughtUp && !this.signal.aborted;
  }

  /** Loads the snapshot; with nothing in the log after it, the state has caught up at once. */
  async load(): Promise<void> {
    const started = Date.now();
    this.cluster = (await loadSnapshot(this.ctx)) ?? emptyCluster();
    this.#snapshotSeq = this.cluster.lastSeq;
    this.startSeq = this.cluster.lastSeq + 1;
    this.ctx.log.info(
      { fromSeq: this.cluster.lastSeq + 1, ms: Date.now() - started },
      'scheduler state loaded',
    );
    if (!(await this.ctx.bus.store.hasAfter(this.cluster.lastSeq))) this.#onCaughtUp();
  }

  /** Reads the log into the state until the term ends, starting the reader again after a stall. */
  async follow(): Promise<void> {
    while (!this.signal.aborted) {
      await this.ctx.events.follow(
        {
          fromSeq: this.cluster.lastSeq + 1,
          maxMessages: 4096,
          signal: this.signal,
          onStall: (read) =>
            this.ctx.log.warn({ read }, 'scheduler reader stalled; starting it again'),
          onMiscount: (read) =>
            this.ctx.log.warn({ read }, 'scheduler reader miscounted; starting it again'),
          onCaughtUp: () => {
            if (!this.#caughtUp) this.#onCaughtUp();
            else this.listener.atEnd();
          },
        },
        (event) => {
          evolveCluster(this.cluster, event);
          if (this.#caughtUp) this.listener.live(event);
          if (this.cluster.lastSeq - this.#snapshotSeq >= this.snapshotEveryEvents)
            this.#snapshot();
        },
      );
    }
  }

  /**
   * The term's last snapshot, if it caught up and folded past the last one; not while another is
   * still being written.
   */
  async finish(): Promise<void> {
    if (this.#caughtUp && this.cluster.lastSeq > this.#snapshotSeq && !this.#snapshotting) {
      await saveSnapshot(this.ctx, this.cluster, FINAL_SNAPSHOT_DEADLINE_MS).catch((err: unknown) =>
        this.ctx.log.warn({ err }, 'final scheduler snapshot failed'),
      );
    }
  }

  #snapshot(): void {
    if (this.#snapshotting) return;
    this.#snapshotting = true;
    const seq = this.cluster.lastSeq;
    saveSnapshot(this.ctx, this.cluster)
      .then(() => (this.#snapshotSeq = seq))
      .catch((err: unknown) => this.ctx.log.warn({ err }, 'scheduler snapshot failed'))
      .finally(() => (this.#snapshotting = false));
  }

  #onCaughtUp(): void {
    this.#caughtUp = true;
    this.ctx.log.info(
      { seq: this.cluster.lastSeq, jobs: this.cluster.jobs.size },
      'scheduler caught up',
    );
    this.listener.caughtUp();
  }
}
