import {
  DEFAULT_POLICY,
  emptyCluster,
  evolveCluster,
  explainQueue,
  GiB,
  plan,
  slotHolder,
  type ClusterState,
} from '@trainyard/domain';
import type { DomainEvent, JobSpec } from '@trainyard/events';
import { storedEvent } from '@trainyard/testkit';
import { summary } from './stats.ts';

/** The fleet: 1,250 workers of 8 GPUs (10,000 GPUs), a third of each of three models. */
const WORKERS = 1_250;
const GPUS_PER_WORKER = 8;
const USERS = 50;
/** Half the users have a quota of 150 GPUs, three quarters of a fair share: theirs binds. */
const QUOTA_USERS = 25;
const QUOTA_GPUS = 150;
/** The other half have a quota of GPU-hours a month, large enough not to bind: it is asked. */
const HOURS_QUOTA = 1_000_000;
const MODELS = [
  { name: 'NVIDIA A100-SXM4-80GB', gb: 80 },
  { name: 'NVIDIA A100-SXM4-40GB', gb: 40 },
  { name: 'NVIDIA L4', gb: 24 },
];
/** Jobs that end between two cycles, as a busy cluster sees them. */
const ENDED_PER_CYCLE = 50;
const HOUR = 3_600_000;

/** A small deterministic generator, so that every run plans the same queue. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1_664_525 + 1_013_904_223) >>> 0;
    return s / 2 ** 32;
  };
}

/** A queue of mixed shapes: one to eight GPUs, declared VRAM or whole, some by model, some CPU. */
function shapeOf(r: () => number): JobSpec['resources'] {
  const x = r();
  if (x < 0.1) return { gpus: 0, cpus: 1 + Math.floor(r() * 4) };
  const gpus = [1, 1, 1, 2, 2, 4, 8][Math.floor(r() * 7)]!;
  if (x < 0.25) return { gpus };
  const vramGb = [8, 16, 20, 35, 70][Math.floor(r() * 5)]!;
  return x < 0.4 ? { gpus, vramGb, gpuModel: 'A100' } : { gpus, vramGb };
}

class Fleet {
  readonly cluster: ClusterState = emptyCluster();
  #seq = 0;
  readonly #running: string[] = [];

  constructor(readonly now: Date) {}

  fold(aggregate: 'job' | 'worker' | 'user', id: string, event: DomainEvent, at = this.now): void {
    evolveCluster(this.cluster, storedEvent(aggregate, id, event, { seq: ++this.#seq, at }));
  }

  /** The quotas of the users who have one, then the workers. */
  register(): void {
    for (let u = 0; u < QUOTA_USERS; u++) {
      this.fold('user', `user${u}`, { type: 'UserQuotaSet', data: { maxGpus: QUOTA_GPUS } });
    }
    for (let u = QUOTA_USERS; u < USERS; u++) {
      this.fold('user', `user${u}`, {
        type: 'UserGpuHoursQuotaSet',
        data: { maxGpuHours: HOURS_QUOTA },
      });
    }
    for (let w = 0; w < WORKERS; w++) {
      const model = MODELS[w % MODELS.length]!;
      this.fold('worker', `w${w}`, {
        type: 'WorkerRegistered',
        data: {
          name: `w${w}`,
          hostname: `h${w}`,
          cpuSlots: 16,
          runtime: 'process',
          version: 'bench',
          dispatchVersion: 5,
          runningAttempts: [],
          gpus: Array.from({ length: GPUS_PER_WORKER }, (_, index) => ({
            index,
            name: model.name,
            uuid: `w${w}-${index}`,
            vramBytes: model.gb * GiB,
            simulated: true,
          })),
        },
      });
    }
  }

  /**
   * `n` jobs submitted over the last two days, priorities from -10 to 10: aging is at work; three
   * in five with a time limit of one to 24 hours, so that backfill has reservations to keep; one
   * in five preemptible, so that preemption has victims to weigh; one in twenty a gang of two to
   * eight workers (never preemptible).
   */
  submit(n: number, r: () => number): void {
    for (let i = 0; i < n; i++) {
      const resources = shapeOf(r);
      const at = new Date(this.now.getTime() - Math.floor(r() * 48 * HOUR));
      const timeLimit = r() < 0.6 ? (1 + Math.floor(r() * 24)) * 3600 : undefined;
      const nodes = r() < 0.05 ? 2 + Math.floor(r() * 7) : undefined;
      const preemptible = nodes === undefined && r() < 0.2;
      this.fold(
        'job',
        `job_${i}`,
        {
          type: 'JobSubmitted',
          data: {
            owner: `user${i % USERS}`,
            spec: {
              name: 'bench',
              command: 'train',
              // Declared VRAM, or taken whole: no probe, so that every job is placeable at once.
              resources,
              priority: Math.floor(r() * 21) - 10,
              ...(timeLimit !== undefined && { timeLimit }),
              ...(preemptible && { preemptible }),
              ...(nodes !== undefined && { nodes }),
              maxRetries: 3,
              env: {},
            },
            build: false,
            estimate: false,
          },
        },
        at,
      );
    }
  }

  /** Records a plan's assignments and their starts, as the log would hold them. */
  commit(assignments: ReturnType<typeof plan>['assignments']): void {
    for (const a of assignments) {
      const attemptId = `att-${a.id}`;
      this.fold('job', a.id, {
        type: 'JobAssigned',
        data: {
          attemptId,
          attempt: 1,
          workerId: a.workerId,
          gpus: a.gpus,
          vramBytes: a.vramBytes,
          cpus: a.cpus,
          ...(a.members && { members: a.members }),
        },
      });
      this.fold('job', a.id, { type: 'JobStarted', data: { attemptId } });
      this.#running.push(a.id);
    }
  }

  /** Ends `n` running jobs, picked at random. */
  finish(n: number, r: () => number): void {
    for (let i = 0; i < n && this.#running.length > 0; i++) {
      const at = Math.floor(r() * this.#running.length);
      const [id] = this.#running.splice(at, 1);
      const attempt = slotHolder(this.cluster.jobs.get(id!)!.state)!;
      this.fold('job', id!, {
        type: 'JobSucceeded',
        data: { attemptId: attempt.id, durationMs: 1 },
      });
    }
  }
}

const timed = <T>(fn: () => T): [T, number] => {
  const started = performance.now();
  const out = fn();
  return [out, performance.now() - started];
};
const round = (ms: number) => Math.round(ms * 10) / 10;

/**
 * One placement cycle (`plan`, the pure policy the scheduler runs each round) over 10,000
 * simulated GPUs with 1k to 100k queued jobs of mixed shapes, gangs among them, aging, GPU quotas and backfill on: the first cycle, which
 * fills the idle fleet, then steady cycles after 50 jobs end each time; and the queue's
 * explanation (`explainQueue`, what `GET /v1/queue` costs the scheduler) on the full queue.
 */
export function policyBench(sizes: number[], cycles: number) {
  return sizes.map((jobs) => {
    const r = random(jobs);
    const fleet = new Fleet(new Date('2026-12-01T12:00:00Z'));
    fleet.register();
    fleet.submit(jobs, r);
    const [first, firstMs] = timed(() => plan(fleet.cluster, fleet.now, DEFAULT_POLICY));
    fleet.commit(first.assignments);
    const steady: number[] = [];
    let placed = 0;
    let reserved = 0;
    let preempting = 0;
    for (let i = 0; i < cycles; i++) {
      fleet.finish(ENDED_PER_CYCLE, r);
      const [cycle, ms] = timed(() => plan(fleet.cluster, fleet.now, DEFAULT_POLICY));
      steady.push(ms);
      placed += cycle.assignments.length;
      if (cycle.reservation) reserved++;
      preempting += cycle.preemptions.length;
      fleet.commit(cycle.assignments);
    }
    const explained = Array.from({ length: 5 }, () =>
      timed(() => explainQueue(fleet.cluster, fleet.now, DEFAULT_POLICY)),
    );
    const view = explained[0]![0];
    return {
      jobs,
      gpus: WORKERS * GPUS_PER_WORKER,
      firstCycle: { ms: round(firstMs), placed: first.assignments.length },
      steadyCycleMs: summary(steady),
      placedPerSteadyCycle: round(placed / cycles),
      /** Steady cycles that kept a reservation for a job that waits. */
      cyclesWithReservation: reserved,
      /** Attempts a steady cycle would stop for the job first in line (not carried out here). */
      preemptionsPerSteadyCycle: round(preempting / cycles),
      explainMs: summary(explained.map(([, ms]) => ms)),
      waiting: view.entries.length,
    };
  });
}
