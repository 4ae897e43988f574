import { cloneWorker, type ClusterState, type WorkerState } from './cluster.ts';
import { free, type Fit, type LiveHolding } from './holding.ts';
import { preemptionsFor, type Preemption } from './preemption.ts';
import type { Candidate } from './candidates.ts';
import type { Assignment } from './fit.ts';
import type { PlacementPolicy } from './policy.ts';

/**
 * Backfill with one reservation (EASY backfill): the first candidate of a round that finds no
 * place, and needs GPUs, is given the earliest place it could start in, worked out from when
 * what runs is expected to end (a job's time limit, a probe's timeout, a session's maximum
 * life). Later candidates may still start ahead of it, but on that place only if they are
 * expected to end before it is due: they never delay it. Work nothing bounds (no time limit) is
 * expected never to end, so a place held by it is never counted on.
 */

/** What a live attempt or session run holds of a worker, and when it is expected to end. */
export interface Release {
  holds: Pick<LiveHolding, 'gpus' | 'vramBytes' | 'cpus' | 'memoryBytes'>;
  /** When it is expected to end (ms since the epoch). */
  endMs: number;
  /** The job's or session's id: what orders releases that end at the same time. */
  key: string;
}

/** The place kept for the first candidate that finds none: where, and from when. */
export interface Reservation {
  kind: Candidate['kind'];
  id: string;
  workerId: string;
  /** Its index among the round's workers. */
  index: number;
  gpus: number[];
  /** When it is expected to start (ms since the epoch). */
  atMs: number;
  /** How many running attempts are being stopped to make that room (0: none, it frees itself). */
  stops: number;
}

/**
 * How long a candidate would hold its place once placed: a probe its timeout, a job its time
 * limit, a session its maximum life; Infinity where nothing bounds it.
 */
export function expectedRunMs(c: Candidate, policy: PlacementPolicy): number {
  if (c.probe) return policy.probeMs;
  return c.limitMs ?? Infinity;
}

function addRelease(byWorker: Map<string, Release[]>, workerId: string, r: Release): void {
  const list = byWorker.get(workerId);
  if (list) list.push(r);
  else byWorker.set(workerId, [r]);
}

/** How many candidates that find no place a round looks for room for, at most. */
const HEADS_TRIED = 4;

/**
 * One round's backfill: the reservation, once a candidate needs one, and what the round placed
 * before it (expected to end too). `explaining` also keeps which candidates the reservation
 * kept out.
 */
export class Backfill {
  reservation: Reservation | null = null;
  /** How many candidates that found no place the round has looked for room for. */
  #tries = 0;
  /** Running attempts to stop for it, when stopping some makes room for it now. */
  preemptions: Preemption[] = [];
  /** Candidates that would have started but for the reservation (only when explaining). */
  readonly keptOut = new Set<string>();
  readonly #placed = new Map<string, Release[]>();

  constructor(
    readonly cluster: ClusterState,
    readonly nowMs: number,
    readonly policy: PlacementPolicy,
    readonly explaining = false,
  ) {}

  /**
   * Whether the round is done looking for room for a candidate that found none: it has kept
   * room for one, or looked for the first few (one that nothing running could make room for,
   * such as a GPU model that only busy hosts have, does not stop those after it from being
   * weighed).
   */
  get tried(): boolean {
    return this.reservation !== null || this.#tries >= HEADS_TRIED;
  }

  /** Whether all that runs on a worker is expected to end: nothing on it runs unbounded. */
  freesUp(workerId: string): boolean {
    return !this.cluster.holding.unbounded.has(workerId);
  }

  /** Whether a candidate, started now, would still run when the reservation is due. */
  late(c: Candidate): boolean {
    const r = this.reservation;
    return r !== null && this.nowMs + expectedRunMs(c, this.policy) > r.atMs;
  }

  /** Notes what the round placed, to be given back when it is expected to end. */
  placed(c: Candidate, a: Assignment): void {
    const runMs = expectedRunMs(c, this.policy);
    if (runMs === Infinity) return;
    const endMs = this.nowMs + runMs;
    const { gpus, vramBytes, cpus } = a;
    const holds = { gpus, vramBytes, cpus, memoryBytes: c.memoryBytes };
    addRelease(this.#placed, a.workerId, { holds, endMs, key: c.id });
  }

  noteKeptOut(c: Candidate): void {
    if (this.explaining) this.keptOut.add(c.id);
  }

  /**
   * Keeps room for `c`, the first candidate with GPUs that found none: where stopping running
   * attempts of preemptible jobs of a lower priority makes room now, that room (the stops are
   * `preemptions`); else the earliest place it could start in (`reserve`).
   */
  forHead(c: Candidate, workers: readonly WorkerState[], fit: Fit): Reservation | null {
    this.#tries++;
    const p = preemptionsFor(c, this.cluster, workers, fit);
    if (!p) return this.#reserve(c, workers, fit);
    this.preemptions = p.stops;
    const { index, workerId, gpus } = p;
    const stops = p.stops.length;
    this.reservation = { kind: c.kind, id: c.id, workerId, index, gpus, atMs: this.nowMs, stops };
    return this.reservation;
  }

  /**
   * What runs on a worker and is expected to end before `beforeMs`: its live attempts and
   * session runs that something bounds (a place held by the rest is never counted on), and what
   * this round placed there.
   */
  #ending(workerId: string, beforeMs: number): Release[] {
    const ending: Release[] = [];
    const live = this.cluster.holding.ending.get(workerId);
    if (live) {
      for (const [h, key] of live) {
        const runMs = h.probe ? this.policy.probeMs : h.runMs!;
        const endMs = Math.max(this.nowMs, (h.startedMs ?? this.nowMs) + runMs);
        if (endMs < beforeMs) ending.push({ holds: h, endMs, key });
      }
    }
    for (const r of this.#placed.get(workerId) ?? []) if (r.endMs < beforeMs) ending.push(r);
    return ending;
  }

  /**
   * Keeps for `c` the earliest place it could start in: on each worker, what runs is given back
   * in the order it is expected to end until `c` fits. None where that cannot be said.
   */
  #reserve(c: Candidate, workers: readonly WorkerState[], fit: Fit): Reservation | null {
    let best: Reservation | null = null;
    for (let i = 0; i < workers.length; i++) {
      const worker = workers[i]!;
      const ending = this.#ending(worker.id, best?.atMs ?? Infinity);
      if (ending.length === 0) continue;
      ending.sort((a, b) => a.endMs - b.endMs || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      const freed = cloneWorker(worker);
      for (const r of ending) {
        free(freed, r.holds);
        const a = fit(c, freed);
        if (!a) continue;
        best = {
          kind: c.kind,
          id: c.id,
          workerId: worker.id,
          index: i,
          gpus: a.gpus,
          atMs: r.endMs,
          stops: 0,
        };
        break;
      }
    }
    this.reservation = best;
    return best;
  }
}

/**
 * A copy of the reserved worker as work that would run past the reservation sees it: its kept
 * GPUs full, and the host memory the reserved candidate needs taken (at least a byte, so that
 * it never looks like a host nothing counts on). What ends before then only frees more.
 */
export function withoutKept(worker: WorkerState, r: Reservation, head: Candidate): WorkerState {
  const view = cloneWorker(worker);
  for (const gpu of view.gpus) {
    if (!r.gpus.includes(gpu.index)) continue;
    gpu.reservedBytes = gpu.vramBytes;
    gpu.attempts += 1;
  }
  view.memoryUsed += Math.max(head.memoryBytes, 1);
  return view;
}
