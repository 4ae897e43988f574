import type { Estimate, JobSpec, Resources } from '@trainyard/events';
import { sessionMemoryNeed } from './holding.ts';
import type { TrackedJob, TrackedSession } from './cluster.ts';
import { probesNext } from './job/state.ts';
import { limitBytes, memoryNeed, needsEstimate, runsInContainer } from './job/needs.ts';
import { isService } from './job/service.ts';
import { teamAccount } from './usage.ts';

/**
 * What placement needs to know of a job or a session that waits for a place. A session is
 * placed like a job that declares its VRAM (or takes its GPUs whole), on the host.
 */
export interface Candidate {
  kind: 'job' | 'session';
  id: string;
  /** Whose it is: a quota holds back what its owner's work may take. */
  owner: string;
  /** The team it is charged to, if any: its quota holds back what its members' work may take. */
  team: string | null;
  /** The key of that team's quotas and holdings (`teamAccount`), made once with the candidate. */
  teamAccount: string | null;
  resources: Resources;
  /** How many workers it spans at once, `resources` on each: a gang job's `nodes`, else 1. */
  nodes: number;
  /** A service's job: its worker must watch its health. */
  service: boolean;
  /** Its priority, aged: see `effectivePriority`. */
  priority: number;
  /** Its own priority, before aging (a session's is 0): what preemption compares. */
  basePriority: number;
  /** Orders candidates of equal priority: the one queued longest first. */
  queuedSeq: number;
  container: boolean;
  estimate: Estimate | null;
  /** Its next attempt is a probe. */
  probe: boolean;
  /** The longest it runs once placed: a job's time limit, a session's maximum life; else null. */
  limitMs: number | null;
  memoryBytes: number;
  /** What it asks of a worker, as a key: see `shapeKey`. */
  shape: string;
  /** What a placement round has found of its shape: shared by the candidates of that shape. */
  mark: ShapeMark;
  /** The job or session as the cluster state tracks it. */
  tracked: TrackedJob | TrackedSession | null;
}

/**
 * A candidate's fields, less its aged priority, its shape and its team's key, which follow from
 * them.
 */
type CandidateFields = Omit<Candidate, 'priority' | 'shape' | 'mark' | 'teamAccount'>;

/**
 * What one placement round has found of a shape: that nothing of it fits any more, or the first
 * worker it may still fit on. A round reads it only if it wrote it (`round`), so it is read as a
 * property, not looked up by its key, for every candidate a round walks.
 */
export interface ShapeMark {
  round: object | null;
  unplaceable: boolean;
  startAt: number;
  /**
   * The same for candidates of the shape that would run past the round's reservation, on the
   * workers as they see them (the reserved GPUs full); `keptOut`: only the reservation kept it out.
   */
  unplaceableLate: boolean;
  lateStartAt: number;
  keptOut: boolean;
  /** What the reserved worker held when `keptOut` was worked out (`Kept.version`). */
  keptOutVersion: number;
}

const marks = new Map<string, ShapeMark>();
/**
 * Shapes marked before the table is started afresh: a candidate made before keeps its mark, and
 * a round then merely looks at its shape twice.
 */
const MAX_MARKS = 65_536;

function markOf(shape: string): ShapeMark {
  let mark = marks.get(shape);
  if (!mark) {
    if (marks.size >= MAX_MARKS) marks.clear();
    mark = {
      round: null,
      unplaceable: false,
      startAt: 0,
      unplaceableLate: false,
      lateStartAt: 0,
      keptOut: false,
      keptOutVersion: -1,
    };
    marks.set(shape, mark);
  }
  return mark;
}

/**
 * A candidate from its fields, built whole: every candidate has one layout, which rounds read
 * fast. Its priority is its own until a round ages it.
 */
function withShape(f: CandidateFields): Candidate {
  const shape = shapeKey(f);
  return {
    kind: f.kind,
    id: f.id,
    owner: f.owner,
    team: f.team,
    teamAccount: f.team === null ? null : teamAccount(f.team),
    resources: f.resources,
    nodes: f.nodes,
    service: f.service,
    priority: f.basePriority,
    basePriority: f.basePriority,
    queuedSeq: f.queuedSeq,
    container: f.container,
    estimate: f.estimate,
    probe: f.probe,
    limitMs: f.limitMs,
    memoryBytes: f.memoryBytes,
    shape,
    mark: markOf(shape),
    tracked: f.tracked,
  };
}

/**
 * The candidate of a tracked job, made once per change of it (`waiting.ts`); its priority is
 * aged as a round reaches it.
 */
export function jobCandidate(job: TrackedJob): Candidate | null {
  const { state } = job;
  const spec = state.spec;
  if (!spec) return null;
  return withShape({
    kind: 'job',
    id: state.id,
    owner: state.owner,
    team: state.team,
    resources: spec.resources,
    nodes: spec.nodes ?? 1,
    service: isService(spec),
    basePriority: spec.priority,
    queuedSeq: job.queuedSeq,
    container: runsInContainer(spec),
    estimate: state.estimate,
    probe: probesNext(state),
    limitMs: spec.timeLimit === undefined ? null : spec.timeLimit * 1000,
    memoryBytes: memoryNeed(state),
    tracked: job,
  });
}

/** The candidate of a tracked session, as `jobCandidate`. */
export function sessionCandidate(session: TrackedSession): Candidate | null {
  const { state } = session;
  const spec = state.spec;
  if (!spec) return null;
  return withShape({
    kind: 'session',
    id: state.id,
    owner: state.owner,
    team: state.team,
    resources: spec.resources,
    nodes: 1,
    service: false,
    basePriority: 0,
    queuedSeq: session.queuedSeq,
    container: state.image !== null,
    estimate: null,
    probe: false,
    limitMs: state.timers ? state.timers.maxMin * 60_000 : null,
    memoryBytes: sessionMemoryNeed(state),
    tracked: session,
  });
}

/** What a job or session asks of any worker, known before it is submitted. */
export interface Need {
  kind: Candidate['kind'];
  resources: Resources;
  /** How many workers it spans at once. */
  nodes: number;
  service: boolean;
  container: boolean;
  /** Its first placement is a probe's (a job with GPUs and no VRAM declared). */
  probe: boolean;
}

/** What a job of this spec asks of any worker (its spec as the cluster runs it). */
export const jobNeed = (spec: JobSpec): Need => ({
  kind: 'job',
  resources: spec.resources,
  nodes: spec.nodes ?? 1,
  service: isService(spec),
  container: runsInContainer(spec),
  probe: (spec.nodes ?? 1) === 1 && needsEstimate(spec),
});

/**
 * A job or session of this need as it would wait to be placed, before anything else of it is
 * known: for asking whether any worker could ever hold it.
 */
export function needCandidate(need: Need): Candidate {
  const fields: CandidateFields = {
    ...need,
    id: '',
    owner: '',
    team: null,
    basePriority: 0,
    queuedSeq: 0,
    estimate: null,
    limitMs: null,
    memoryBytes: limitBytes(need.resources),
    tracked: null,
  };
  return withShape(fields);
}

/**
 * What a job or session asks of a worker, as a key. Within one round capacity only shrinks, so
 * once a job finds no place, no later job that asks the same finds one either.
 */
export function shapeKey(c: CandidateFields): string {
  const { gpus, vramGb, cpus, gpuModel, memoryGb } = c.resources;
  return JSON.stringify([
    c.kind,
    c.container,
    memoryGb !== undefined,
    gpus,
    gpus === 0 ? (cpus ?? 1) : null,
    vramGb ?? null,
    gpuModel ?? null,
    c.estimate?.vramBytes ?? null,
    c.probe,
    c.memoryBytes,
    c.nodes,
    c.service,
  ]);
}
