import type { ClusterState, TrackedJob, TrackedSession } from './cluster.ts';
import { jobCandidate, sessionCandidate, type Candidate } from './candidates.ts';
import { MergedQueue, type PlacementQueue, type Stream } from './placement-queue.ts';
import { awaitsPlacement } from './job/state.ts';
import { agingTick, effectivePriority, type PlacementPolicy } from './policy.ts';
import { sessionAwaitsPlacement } from './session/state.ts';

/**
 * The queue as placement walks it, kept across rounds rather than sorted afresh in each.
 *
 * A candidate is placed by its aged priority: its own priority plus the aging ticks of the clock
 * since it was queued (`effectivePriority`), then by the order of the log. That is its own
 * priority less the ticks up to when it was queued, a key that does not change as it waits, plus
 * the ticks up to now, which are the same for all: so the order of what waits changes only as it
 * changes. What waits is kept in families of candidates that ask the same of a worker (a shape)
 * for as long (a time limit), each in that order; a round merges the families by their next
 * candidates, which gives the order of sorting the whole queue, and may pass over the rest of a
 * family at once (`PlacementQueue.skip`) once its shape fits nowhere. A round costs what it
 * weighs, not what waits.
 *
 * The cluster fold tells the queue of each job and session it changes (`ClusterState.queue`), as
 * it changes it: an entry a later change replaced is left out from then on, and what rounds
 * placed is passed over at the head of its family, so that a round does not pay for the log's
 * changes since the last.
 */

type Tracked = TrackedJob | TrackedSession;

/** A job or session in the queue, as one change of it left it. */
interface Entry {
  readonly tracked: Tracked;
  readonly candidate: Candidate;
  /** When a retry's backoff ends (ms since the epoch); 0 when it may go at once. */
  readonly dueMs: number;
  readonly family: Family;
  /** A later change of its job or session replaced it, or ended it. */
  dead: boolean;
  /** The aging tick it was queued in. */
  tick: number;
  /** Its own priority less `tick`: its aged priority less the ticks up to now. */
  key: number;
}

interface Family {
  entries: Entry[];
  /** Entries whose job or session changed or ended since they were put here. */
  dead: number;
  /** Whether `entries` are in order: `key` down, then `queuedSeq` up. */
  sorted: boolean;
  /** Where its first live entry is, or may be: those before it are dead. */
  head: number;
  /** The latest tick an entry was queued in: one after now ages from now (`effectivePriority`). */
  lastTick: number;
}

interface Index {
  families: Map<string, Family>;
  jobs: Map<string, Entry>;
  sessions: Map<string, Entry>;
  /** Jobs in a retry's backoff: what tells the scheduler when to look again. */
  retries: Map<string, Entry>;
  /** The aging rate the keys were worked out with. */
  aging: Pick<PlacementPolicy, 'agingPerHour'>;
}

const indexes = new WeakMap<ClusterState, Index>();

/**
 * The index of a cluster state, made from what it tracks the first time it is asked for, and
 * kept by the fold from then on.
 */
function indexOf(cluster: ClusterState, policy: PlacementPolicy): Index {
  let index = indexes.get(cluster);
  if (!index) {
    const aging = { agingPerHour: policy.agingPerHour };
    index = {
      families: new Map(),
      jobs: new Map(),
      sessions: new Map(),
      retries: new Map(),
      aging,
    };
    indexes.set(cluster, index);
    const kept = index;
    for (const [id, job] of cluster.jobs) noteJob(kept, id, job);
    for (const [id, session] of cluster.sessions) noteSession(kept, id, session);
    cluster.queue = {
      job: (id, job) => noteJob(kept, id, job),
      session: (id, session) => noteSession(kept, id, session),
    };
  }
  if (index.aging.agingPerHour !== policy.agingPerHour) rekey(index, policy);
  return index;
}

/** Works every key out again for another aging rate. */
function rekey(index: Index, policy: PlacementPolicy): void {
  index.aging = { agingPerHour: policy.agingPerHour };
  for (const family of index.families.values()) {
    family.lastTick = 0;
    for (const e of family.entries) setKey(index, e);
    family.sorted = false;
  }
}

function setKey(index: Index, e: Entry): void {
  e.tick = agingTick(e.tracked.queuedAtMs, index.aging);
  e.key = e.candidate.basePriority - e.tick;
  e.family.lastTick = Math.max(e.family.lastTick, e.tick);
}

function forget(index: Index, byId: Map<string, Entry>, id: string): void {
  const old = byId.get(id);
  if (!old) return;
  old.dead = true;
  const family = old.family;
  family.dead++;
  const { entries } = family;
  if (entries[family.head] === old) {
    do family.head++;
    while (family.head < entries.length && entries[family.head]!.dead);
  }
  byId.delete(id);
  index.retries.delete(id);
}

function noteJob(index: Index, id: string, job: TrackedJob | null): void {
  forget(index, index.jobs, id);
  if (!job || !awaitsPlacement(job.state)) return;
  const { status, retryAt } = job.state;
  if (status === 'retrying' && !retryAt) return;
  const dueMs = status === 'retrying' ? Date.parse(retryAt!) : 0;
  const candidate = jobCandidate(job);
  if (!candidate) return;
  const entry = add(index, job, candidate, dueMs);
  index.jobs.set(id, entry);
  if (status === 'retrying') index.retries.set(id, entry);
}

function noteSession(index: Index, id: string, session: TrackedSession | null): void {
  forget(index, index.sessions, id);
  if (!session || !sessionAwaitsPlacement(session.state)) return;
  const candidate = sessionCandidate(session);
  if (candidate) index.sessions.set(id, add(index, session, candidate, 0));
}

function add(index: Index, tracked: Tracked, candidate: Candidate, dueMs: number): Entry {
  const name = `${candidate.shape}|${candidate.probe ? 'probe' : candidate.limitMs}`;
  let family = index.families.get(name);
  if (!family) {
    family = { entries: [], dead: 0, sorted: true, head: 0, lastTick: 0 };
    index.families.set(name, family);
  }
  const entry: Entry = { tracked, candidate, dueMs, family, dead: false, tick: 0, key: 0 };
  setKey(index, entry);
  const last = family.entries[family.entries.length - 1];
  if (last && !inOrder(last, entry)) family.sorted = false;
  family.entries.push(entry);
  return entry;
}

/** Whether `a` comes before `b` in a family (`key` down, then the log's order). */
const inOrder = (a: Entry, b: Entry) =>
  a.key > b.key || (a.key === b.key && a.tracked.queuedSeq < b.tracked.queuedSeq);
const byOrder = (a: Entry, b: Entry) => b.key - a.key || a.tracked.queuedSeq - b.tracked.queuedSeq;

/**
 * Drops a family's dead entries once they are half of it (those at its head, what rounds placed,
 * are passed over until then), and puts it back in order.
 */
function tidy(family: Family): void {
  if (family.head * 2 > family.entries.length) {
    family.entries.splice(0, family.head);
    family.dead -= family.head;
    family.head = 0;
  }
  if (family.dead * 2 > family.entries.length) {
    family.entries = family.entries.filter((e) => !e.dead);
    family.dead = 0;
    family.head = 0;
    family.lastTick = 0;
    for (const e of family.entries) family.lastTick = Math.max(family.lastTick, e.tick);
  }
  if (!family.sorted) {
    family.entries.sort(byOrder);
    family.sorted = true;
    family.head = 0;
    while (family.head < family.entries.length && family.entries[family.head]!.dead) family.head++;
  }
}

/** What a round reads of the time, shared by its cursors. */
interface Round {
  now: Date;
  nowMs: number;
  nowTick: number;
  policy: PlacementPolicy;
}

/** A round's place in one family: its next candidate, with that candidate's aged priority set. */
class Cursor implements Stream {
  head: Entry | null = null;
  /** The head's aged priority and `queuedSeq`, kept here for the heap to compare. */
  priority = 0;
  seq = 0;
  #i = 0;
  readonly #entries: Entry[];

  constructor(
    family: Family,
    readonly round: Round,
  ) {
    // Queued in a tick still to come, by a clock ahead of this one: it ages from now, not from
    // then, and so does not keep its key's place. Only then is the family sorted for the round.
    if (family.lastTick > round.nowTick) this.#entries = this.#byAged(family);
    else {
      this.#entries = family.entries;
      this.#i = family.head;
    }
  }

  /** Moves to the family's next candidate that may be placed now. */
  advance(): void {
    const entries = this.#entries;
    const { nowMs, nowTick } = this.round;
    while (this.#i < entries.length) {
      const e = entries[this.#i++]!;
      if (e.dead || e.dueMs > nowMs) continue;
      this.priority = e.tick > nowTick ? e.candidate.basePriority : e.key + nowTick;
      this.seq = e.tracked.queuedSeq;
      e.candidate.priority = this.priority;
      this.head = e;
      return;
    }
    this.head = null;
  }

  #byAged(family: Family): Entry[] {
    const { now, policy } = this.round;
    const aged = (e: Entry) =>
      effectivePriority(e.candidate.basePriority, e.tracked.queuedAtMs, now, policy);
    return family.entries
      .map((e) => ({ e, priority: aged(e) }))
      .sort((a, b) => b.priority - a.priority || a.e.tracked.queuedSeq - b.e.tracked.queuedSeq)
      .map(({ e }) => e);
  }
}

/** A cursor on each family with a candidate that may be placed at `now`, at that candidate. */
function open(cluster: ClusterState, now: Date, policy: PlacementPolicy) {
  const index = indexOf(cluster, policy);
  const nowMs = now.getTime();
  const round: Round = { now, nowMs, nowTick: agingTick(nowMs, policy), policy };
  const cursors: Cursor[] = [];
  for (const [name, family] of index.families) {
    tidy(family);
    if (family.entries.length === 0) {
      index.families.delete(name);
      continue;
    }
    const cursor = new Cursor(family, round);
    cursor.advance();
    if (cursor.head) cursors.push(cursor);
  }
  let wakeAt: number | null = null;
  for (const e of index.retries.values()) {
    if (e.dueMs > nowMs) wakeAt = Math.min(wakeAt ?? e.dueMs, e.dueMs);
  }
  return { cursors, wakeAt: wakeAt === null ? null : new Date(wakeAt) };
}

/**
 * What waits for a place in `cluster` at `now`, as a queue in placement order (higher aged
 * priority first, then the one queued first in the log), and when the next retry now in its
 * backoff comes due.
 */
export function waitingQueue(
  cluster: ClusterState,
  now: Date,
  policy: PlacementPolicy,
): { queue: PlacementQueue; wakeAt: Date | null } {
  const { cursors, wakeAt } = open(cluster, now, policy);
  return { queue: new MergedQueue(cursors), wakeAt };
}

/**
 * Everything that may be placed now, in placement order (`waitingQueue`, all of it): taken
 * whole, it is sorted by aged priority, which takes few values, then by the log's order.
 */
export function waitingInOrder(cluster: ClusterState, now: Date, policy: PlacementPolicy) {
  const { cursors, wakeAt } = open(cluster, now, policy);
  const byPriority = new Map<number, Candidate[]>();
  for (const cursor of cursors) {
    for (; cursor.head; cursor.advance()) {
      const bucket = byPriority.get(cursor.priority);
      if (bucket) bucket.push(cursor.head.candidate);
      else byPriority.set(cursor.priority, [cursor.head.candidate]);
    }
  }
  const ready: Candidate[] = [];
  for (const priority of [...byPriority.keys()].sort((a, b) => b - a)) {
    for (const c of byPriority.get(priority)!.sort(bySeq)) ready.push(c);
  }
  return { ready, wakeAt };
}

const bySeq = (a: Candidate, b: Candidate) => a.queuedSeq - b.queuedSeq;
