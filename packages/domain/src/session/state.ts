import type {
  BuiltImage,
  CodeArchive,
  Failure,
  SessionEvent,
  SessionSpec,
  SessionStatus,
  SessionStopReason,
  SessionTimers,
} from '@trainyard/events';
import { assertNever } from '../errors.ts';

/** One placement of a session on a worker. */
export interface RunState {
  id: string;
  number: number;
  workerId: string;
  gpus: number[];
  vramBytes: number;
  cpus: number;
  assignedAt: string;
  startedAt: string | null;
  endedAt: string | null;
}

export interface SessionState {
  id: string;
  status: SessionStatus | 'none';
  owner: string;
  /** The team its GPUs are charged to, if any. */
  team: string | null;
  spec: SessionSpec | null;
  timers: SessionTimers | null;
  /** The code unpacked in its home on each run, if the user sent some. */
  code: CodeArchive | null;
  /** The image it runs in, when it runs in a container: a job's, or its own once built. */
  image: BuiltImage | null;
  /** The builder that holds its build, while it is `building`. */
  builderId: string | null;
  requestedAt: string | null;
  runs: RunState[];
  /** When the current run started running. */
  startedAt: string | null;
  /** When someone first logged in to the current run. */
  connectedAt: string | null;
  /** Open channels, as the gateway last said: true from the first opened to the last closed. */
  active: boolean;
  /** When the last channel closed (or, before any opened, when the run started). */
  idleSince: string | null;
  stopReason: SessionStopReason | null;
  /** When it was asked to stop. */
  stoppingSince: string | null;
  failure: Failure | null;
  /** Why the session was placed again, shown to its user until it runs again. */
  requeuedBecause: string | null;
  endedAt: string | null;
}

export const initialSessionState = (id: string): SessionState => ({
  id,
  status: 'none',
  owner: '',
  team: null,
  spec: null,
  timers: null,
  code: null,
  image: null,
  builderId: null,
  requestedAt: null,
  runs: [],
  startedAt: null,
  connectedAt: null,
  active: false,
  idleSince: null,
  stopReason: null,
  stoppingSince: null,
  failure: null,
  requeuedBecause: null,
  endedAt: null,
});

/** The run that holds (or last held) the session's slot. */
export function currentRun(state: SessionState): RunState | undefined {
  return state.runs[state.runs.length - 1];
}

const ENDED = new Set<string>(['stopped', 'failed']);

export function sessionEnded(status: SessionState['status']): boolean {
  return ENDED.has(status);
}

/** The run that holds the session's slot now: placed, not ended, the session not ended. */
export function runHolder(state: SessionState): RunState | undefined {
  const run = currentRun(state);
  return run && run.endedAt === null && !sessionEnded(state.status) ? run : undefined;
}

/** Whether the session waits for a place. */
export function sessionAwaitsPlacement(state: SessionState): boolean {
  return state.status === 'queued';
}

/** Whether this event ends its session: nothing but logins can follow it. */
export function endsSession(event: SessionEvent): boolean {
  return event.type === 'SessionStopped' || event.type === 'SessionFailed';
}

function endRun(state: SessionState, runId: string | null, at: string): RunState[] {
  return state.runs.map((r) => (r.id === runId && r.endedAt === null ? { ...r, endedAt: at } : r));
}

/** Folds one event into the session's state. `at` is the event's `occurredAt`. */
export function evolveSession(state: SessionState, event: SessionEvent, at: string): SessionState {
  switch (event.type) {
    case 'SessionRequested':
      return {
        ...state,
        status: event.data.build ? 'building' : 'queued',
        owner: event.data.owner,
        team: event.data.team ?? null,
        spec: event.data.spec,
        timers: event.data.timers,
        code: event.data.code ?? null,
        image: event.data.image ?? null,
        requestedAt: at,
      };
    case 'SessionBuildStarted':
      return { ...state, builderId: event.data.builderId };
    case 'SessionBuilt':
      return { ...state, status: 'queued', image: event.data.image, builderId: null };
    case 'SessionAssigned':
      return {
        ...state,
        status: 'starting',
        runs: [
          ...state.runs,
          {
            id: event.data.runId,
            number: event.data.run,
            workerId: event.data.workerId,
            gpus: event.data.gpus,
            vramBytes: event.data.vramBytes,
            cpus: event.data.cpus,
            assignedAt: at,
            startedAt: null,
            endedAt: null,
          },
        ],
      };
    case 'SessionStarted':
      return {
        ...state,
        status: state.status === 'stopping' ? 'stopping' : 'running',
        startedAt: at,
        connectedAt: null,
        active: false,
        idleSince: at,
        requeuedBecause: null,
        runs: state.runs.map((r) => (r.id === event.data.runId ? { ...r, startedAt: at } : r)),
      };
    case 'SessionStopRequested':
      return { ...state, status: 'stopping', stopReason: event.data.reason, stoppingSince: at };
    case 'SessionStopped':
      return {
        ...state,
        status: 'stopped',
        active: false,
        endedAt: at,
        runs: endRun(state, event.data.runId, at),
      };
    case 'SessionFailed':
      return {
        ...state,
        status: 'failed',
        failure: event.data.failure,
        active: false,
        endedAt: at,
        runs: endRun(state, event.data.runId, at),
      };
    case 'SessionRequeued':
      return {
        ...state,
        status: 'queued',
        startedAt: null,
        connectedAt: null,
        active: false,
        idleSince: null,
        requeuedBecause: event.data.reason,
        runs: endRun(state, event.data.runId, at),
      };
    case 'SessionLogin':
      // A login is activity: the idle timer counts from it until a channel opens.
      if (!event.data.accepted || state.status !== 'running') return state;
      return {
        ...state,
        connectedAt: state.connectedAt ?? at,
        idleSince: state.active ? null : at,
      };
    case 'SessionActivity':
      if (event.data.runId !== runHolder(state)?.id) return state;
      // A channel opened is a connection, whether or not its login was recorded.
      return {
        ...state,
        active: event.data.active,
        idleSince: event.data.active ? null : at,
        connectedAt: state.connectedAt ?? (event.data.active ? at : null),
      };
    default:
      return assertNever(event);
  }
}
