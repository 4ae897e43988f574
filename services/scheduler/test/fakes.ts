import {
  decideJob,
  emptyCluster,
  evolveCluster,
  GiB,
  type Assignment,
  type ClusterState,
} from '@trainyard/domain';
import type { DomainEvent, JobSpec, StoredEvent } from '@trainyard/events';
import { storedEvent } from '@trainyard/testkit';
import type { Clock } from '../src/clock.ts';

export const T0 = new Date('2026-01-01T00:00:00.000Z');

/** A clock that stands still until a test moves it, firing the timers that come due. */
export class FakeClock implements Clock {
  #now = T0.getTime();
  #timers: { at: number; fn: () => void }[] = [];

  now(): Date {
    return new Date(this.#now);
  }

  after(ms: number, fn: () => void): () => void {
    const timer = { at: this.#now + ms, fn };
    this.#timers.push(timer);
    return () => (this.#timers = this.#timers.filter((t) => t !== timer));
  }

  advance(ms: number): void {
    const until = this.#now + ms;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = due.at;
      due.fn();
    }
    this.#now = until;
  }
}

/**
 * The event log as the scheduler sees it, in memory: appends land at once, and the state folds
 * them only when the test delivers them, as the reader would.
 */
export class FakeLog {
  readonly events: StoredEvent[] = [];
  readonly state: ClusterState = emptyCluster();
  /** Told after each delivery, as the fold tells the rounds that it reached the log's end. */
  onDelivered: () => void = () => undefined;

  append(aggregate: 'job' | 'worker' | 'user', id: string, event: DomainEvent, at = T0): number {
    const seq = this.events.length + 1;
    this.events.push(storedEvent(aggregate, id, event, { seq, at }));
    return seq;
  }

  /** Folds every appended event the state does not hold yet. */
  deliver(): void {
    for (const event of this.events.slice(this.state.lastSeq)) evolveCluster(this.state, event);
    this.onDelivered();
  }

  lastSeq = (): Promise<number> => Promise.resolve(this.events.length);

  /** Appends what the decider answers to assigning `a`, as the scheduler's append does. */
  assignJob(a: Assignment): number {
    const job = this.state.jobs.get(a.id)!;
    const { kind: _kind, id: _id, ...placement } = a;
    const events = decideJob(
      { type: 'AssignJob', attemptId: `att-${a.id}`, ...placement },
      job.state,
    );
    return Math.max(...events.map((e) => this.append('job', a.id, e)));
  }
}

/** A worker registering with one GPU per entry of `gpuGb`, of that many GiB. */
export const worker = (id: string, gpuGb: number[], dispatchVersion?: number): DomainEvent => ({
  type: 'WorkerRegistered',
  data: {
    ...(dispatchVersion !== undefined && { dispatchVersion }),
    name: id,
    hostname: 'h',
    cpuSlots: 0,
    runtime: 'process',
    version: 't',
    runningAttempts: [],
    gpus: gpuGb.map((gb, index) => ({
      index,
      name: 'sim',
      uuid: `${id}-${index}`,
      vramBytes: gb * GiB,
      simulated: true,
    })),
  },
});

/** A job submitted asking for `resources`. */
export const submitted = (resources: JobSpec['resources']): DomainEvent => ({
  type: 'JobSubmitted',
  data: {
    owner: 'alice',
    spec: { name: 'train', command: 'true', resources, priority: 0, maxRetries: 3, env: {} },
  },
});
