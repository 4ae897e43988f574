import type {
  AttemptStatus,
  BlobRef,
  BuiltImage,
  CodeArchive,
  Estimate,
  Failure,
  HoldBy,
  JobEvent,
  JobSpec,
  JobStatus,
  JobSubmittedData,
  OutputFile,
  Placement,
  ShardOf,
} from '@trainyard/events';
import { assertNever } from '../errors.ts';

export interface AttemptState {
  id: string;
  number: number;
  workerId: string;
  gpus: number[];
  vramBytes: number;
  cpus: number;
  status: AttemptStatus;
  assignedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  exitCode: number | null;
  failure: Failure | null;
  /** The attempt is the job's probe, which measures its first steps and stops it. */
  probe: boolean;
  /** A gang job's other members, ranks 1 and on (rank 0 is the placement above). */
  members: Placement[];
  /** The port a gang's rank 0 listens on for the others, where the assignment chose one. */
  masterPort: number | null;
  /** A service's ports on its worker (none for any other job). */
  ports: number[];
  /** The ranks of a gang's members that started, and how those that ended did. */
  ranksStarted: number[];
  memberEnds: MemberEnd[];
  /**
   * When a gang's members were told to stop (a member failed, a cancel, the time limit): from
   * then, the attempt ends once every member that started has, or after the acceptance time.
   */
  brokenAt: string | null;
}

/** How one member of a gang's attempt ended. */
export interface MemberEnd {
  rank: number;
  exitCode: number | null;
  failure: Failure | null;
  durationMs: number;
  /** Its worker stopped it: when told to, or itself past the job's time limit. */
  stopped: boolean;
  timeLimited: boolean;
}

export interface JobState {
  id: string;
  status: JobStatus | 'none';
  owner: string;
  /** The team its GPUs are charged to, if any. */
  team: string | null;
  spec: JobSpec | null;
  code: CodeArchive | null;
  artifact: BlobRef | null;
  /** The image built for the job, when its spec names a base image. */
  image: BuiltImage | null;
  /** Whether a probe measures the job before it is placed, as decided at submission. */
  estimates: boolean;
  /** What the probe measured, once it has. */
  estimate: Estimate | null;
  /** The builder that holds the build, while the job is `building`. */
  builderId: string | null;
  attempts: AttemptState[];
  cancelRequested: boolean;
  /** Every job in its spec's `dependsOn` has succeeded (true for a job without any). */
  dependenciesMet: boolean;
  /** The running attempt reached the job's time limit: however it ends, the job fails. */
  timeLimitReached: boolean;
  /** The running attempt is being stopped for work of a higher priority: it is queued again. */
  preemptRequested: boolean;
  /** Its place in its array job, when it is a shard of one. */
  shardOf: ShardOf | null;
  /** How many shards an array job has submitted (0 until it has, and for any other job). */
  shardCount: number;
  /** Its hold, while it is held: it is not placed until released. */
  held: { by: HoldBy; reason: string } | null;
  retryAt: string | null;
  failure: Failure | null;
  submittedAt: string | null;
  outputs: OutputFile[];
  /** The worker that wrote `outputs`: the one whose attempt last reported them. */
  outputsWorkerId: string | null;
  /** The attempt that last reported `outputs`: its outputs are kept under its id. */
  outputsAttemptId: string | null;
}

export const initialJobState = (id: string): JobState => ({
  id,
  status: 'none',
  owner: '',
  team: null,
  spec: null,
  code: null,
  artifact: null,
  image: null,
  estimates: false,
  estimate: null,
  builderId: null,
  attempts: [],
  cancelRequested: false,
  dependenciesMet: true,
  timeLimitReached: false,
  preemptRequested: false,
  shardOf: null,
  shardCount: 0,
  held: null,
  retryAt: null,
  failure: null,
  submittedAt: null,
  outputs: [],
  outputsWorkerId: null,
  outputsAttemptId: null,
});

/**
 * Whether a submitted job is built before it is queued: as decided at submission, or, for an
 * event recorded before the decision was, by the rule of that time.
 */
export function buildsFirst(data: JobSubmittedData): boolean {
  return data.build ?? (!data.spec.image && (data.code != null || data.spec.setup != null));
}

/** Whether the job's next attempt is its probe: it is to be measured and has not been. */
export function probesNext(state: JobState): boolean {
  return state.estimates && !state.estimate;
}

/** The status of a job that waits to be placed: `estimating` until its probe has measured it. */
function waiting(state: JobState): JobStatus {
  return probesNext(state) ? 'estimating' : 'queued';
}

/** The attempt that holds (or last held) the job's slot. */
export function currentAttempt(state: JobState): AttemptState | undefined {
  return state.attempts[state.attempts.length - 1];
}

/** The attempt that holds the job's slot now (assigned or running), if any. */
export function slotHolder(state: JobState): AttemptState | undefined {
  const attempt = currentAttempt(state);
  return attempt &&
    (attempt.status === 'assigned' || attempt.status === 'running') &&
    !isTerminal(state.status)
    ? attempt
    : undefined;
}

/**
 * When the job's running attempt reaches its time limit (ms since the epoch): its start plus the
 * limit. Null when it has no limit, runs nothing that counts (a probe, an attempt not started),
 * or is already being stopped.
 */
export function timeLimitDeadline(state: JobState): number | null {
  const limit = state.spec?.timeLimit;
  if (limit === undefined || state.timeLimitReached || state.cancelRequested) return null;
  const attempt = slotHolder(state);
  if (!attempt || attempt.probe || attempt.status !== 'running' || !attempt.startedAt) return null;
  // A gang's members being stopped end it as they end, not at its time limit.
  if (attempt.brokenAt !== null) return null;
  return Date.parse(attempt.startedAt) + limit * 1000;
}

/**
 * Whether a job waits for a place: queued, a retry, or a probe yet to run, with every job it
 * depends on succeeded, and not held.
 */
export function awaitsPlacement(state: JobState): boolean {
  return (
    state.dependenciesMet &&
    !state.held &&
    state.spec?.shards === undefined &&
    (state.status === 'queued' ||
      state.status === 'retrying' ||
      (state.status === 'estimating' && slotHolder(state) === undefined))
  );
}

/** Whether a job still waits for jobs it depends on to end. */
export function awaitsDependencies(state: JobState): boolean {
  return !state.dependenciesMet && state.spec?.dependsOn !== undefined && !isTerminal(state.status);
}

const TERMINAL = new Set<string>(['succeeded', 'failed', 'cancelled']);

export function isTerminal(status: JobState['status']): boolean {
  return TERMINAL.has(status);
}

/** The attempts, with the live one's members told to stop at `at`, if not before. */
function broken(state: JobState, at: string): AttemptState[] {
  const live = slotHolder(state);
  return live && live.brokenAt === null
    ? withAttempt(state, live.id, () => ({ brokenAt: at }))
    : state.attempts;
}

function withAttempt(
  state: JobState,
  attemptId: string,
  patch: (a: AttemptState) => Partial<AttemptState>,
): AttemptState[] {
  return state.attempts.map((a) => (a.id === attemptId ? { ...a, ...patch(a) } : a));
}

/** Folds one event into the job's state. `at` is the event's `occurredAt`. */
export function evolveJob(state: JobState, event: JobEvent, at: string): JobState {
  switch (event.type) {
    case 'JobSubmitted': {
      const next: JobState = {
        ...state,
        owner: event.data.owner,
        team: event.data.team ?? null,
        spec: event.data.spec,
        code: event.data.code ?? null,
        artifact: event.data.built?.artifact ?? null,
        image: event.data.built?.image ?? null,
        shardOf: event.data.shardOf ?? null,
        estimates: event.data.estimate ?? false,
        dependenciesMet: !event.data.spec.dependsOn,
        held: event.data.hold ? { by: event.data.hold, reason: '' } : null,
        submittedAt: at,
      };
      return { ...next, status: buildsFirst(event.data) ? 'submitted' : waiting(next) };
    }
    case 'JobBuildStarted':
      return { ...state, status: 'building', builderId: event.data.builderId };
    case 'JobBuilt':
      return {
        ...state,
        status: waiting(state),
        artifact: event.data.artifact,
        image: event.data.image ?? null,
      };
    case 'JobBuildFailed':
      return { ...state, status: 'failed', failure: event.data.failure };
    case 'JobAssigned':
      return {
        ...state,
        status: event.data.probe ? 'estimating' : 'assigned',
        retryAt: null,
        preemptRequested: false,
        attempts: [
          ...state.attempts,
          {
            id: event.data.attemptId,
            number: event.data.attempt,
            workerId: event.data.workerId,
            gpus: event.data.gpus,
            vramBytes: event.data.vramBytes,
            cpus: event.data.cpus,
            status: 'assigned',
            assignedAt: at,
            startedAt: null,
            finishedAt: null,
            exitCode: null,
            failure: null,
            probe: event.data.probe ?? false,
            members: event.data.members ?? [],
            masterPort: event.data.masterPort ?? null,
            ports: event.data.ports ?? [],
            ranksStarted: [],
            memberEnds: [],
            brokenAt: null,
          },
        ],
      };
    case 'JobMemberStarted':
      return {
        ...state,
        attempts: withAttempt(state, event.data.attemptId, (a) => ({
          ranksStarted: [...a.ranksStarted, event.data.rank],
        })),
      };
    case 'JobMemberEnded': {
      const { rank, exitCode, failure, durationMs } = event.data;
      const timeLimited = event.data.timeLimited === true;
      const stopped = event.data.stopped === true || timeLimited;
      return {
        ...state,
        attempts: withAttempt(state, event.data.attemptId, (a) => ({
          memberEnds: [
            ...a.memberEnds.filter((e) => e.rank !== rank),
            { rank, exitCode, failure, durationMs, stopped, timeLimited },
          ],
          brokenAt: a.brokenAt ?? (failure || timeLimited ? at : null),
        })),
      };
    }
    case 'JobStarted':
      return {
        ...state,
        status: state.attempts.find((a) => a.id === event.data.attemptId)?.probe
          ? 'estimating'
          : 'running',
        attempts: withAttempt(state, event.data.attemptId, () => ({
          status: 'running',
          startedAt: at,
        })),
      };
    case 'JobEstimated':
      return {
        ...state,
        status: 'queued',
        estimate: event.data.estimate,
        attempts: withAttempt(state, event.data.attemptId, () => ({
          status: 'succeeded',
          finishedAt: at,
          exitCode: 0,
        })),
      };
    case 'JobOutputsSynced':
      return {
        ...state,
        outputs: event.data.files,
        outputsWorkerId:
          state.attempts.find((a) => a.id === event.data.attemptId)?.workerId ?? null,
        outputsAttemptId: event.data.attemptId,
      };
    case 'JobSucceeded':
      return {
        ...state,
        status: 'succeeded',
        attempts: withAttempt(state, event.data.attemptId, () => ({
          status: 'succeeded',
          finishedAt: at,
          exitCode: 0,
        })),
      };
    case 'JobAttemptFailed': {
      const { retry, failure } = event.data;
      return {
        ...state,
        status: retry ? 'retrying' : 'failed',
        retryAt: retry?.retryAt ?? null,
        preemptRequested: false,
        failure,
        attempts: withAttempt(state, event.data.attemptId, () => ({
          status: 'failed',
          finishedAt: at,
          exitCode: event.data.exitCode,
          failure,
        })),
      };
    }
    case 'JobCancelRequested':
      return { ...state, cancelRequested: true, attempts: broken(state, at) };
    case 'JobTimeLimitReached':
      return { ...state, timeLimitReached: true, attempts: broken(state, at) };
    case 'JobPreempted':
      return { ...state, preemptRequested: true };
    case 'JobDependenciesMet':
      return { ...state, dependenciesMet: true };
    case 'JobDependencyFailed':
      return { ...state, status: 'failed', failure: event.data.failure };
    case 'JobLogin':
      return state;
    case 'JobSharded':
      return { ...state, status: 'running', shardCount: event.data.count };
    case 'JobShardsEnded':
      return { ...state, status: event.data.status, failure: event.data.failure ?? null };
    case 'JobHeld':
      return { ...state, held: { by: event.data.by, reason: event.data.reason } };
    case 'JobReleased':
      return { ...state, held: null };
    case 'JobPriorityChanged':
      return state.spec
        ? { ...state, spec: { ...state.spec, priority: event.data.priority } }
        : state;
    case 'JobCancelled': {
      const attemptId = event.data.attemptId;
      return {
        ...state,
        status: 'cancelled',
        attempts: attemptId
          ? withAttempt(state, attemptId, () => ({ status: 'cancelled', finishedAt: at }))
          : state.attempts,
      };
    }
    default:
      return assertNever(event);
  }
}
