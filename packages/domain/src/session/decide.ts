import type {
  BuiltImage,
  CodeArchive,
  Failure,
  SessionEvent,
  SessionSpec,
  SessionStopReason,
  SessionTimers,
  SshLogin,
} from '@trainyard/events';
import { assertNever, DomainError } from '../errors.ts';
import { currentRun, runHolder, sessionEnded, type SessionState } from './state.ts';

/** Commands on a session. Time arrives inside them; `decide` has no clock. */
export type SessionCommand =
  | {
      type: 'RequestSession';
      owner: string;
      spec: SessionSpec;
      timers: SessionTimers;
      code?: CodeArchive;
      image?: BuiltImage;
      /** The team its GPUs are charged to, as the API decided from its owner's teams. */
      team?: string;
    }
  | {
      type: 'AssignSession';
      runId: string;
      workerId: string;
      gpus: number[];
      vramBytes: number;
      cpus: number;
    }
  /** A builder takes the build of a session that names a base image, or of a builder gone. */
  | { type: 'StartBuild'; builderId: string }
  | { type: 'ReclaimBuild'; builderId: string; goneBuilderId: string }
  | { type: 'CompleteBuild'; builderId: string; image: BuiltImage; durationMs: number }
  | { type: 'FailBuild'; builderId: string; failure: Failure }
  | { type: 'StartRun'; runId: string }
  /** The worker ended the run: as asked (stopped), or of its own accord (failed). */
  | { type: 'EndRun'; runId: string; failure: Failure | null }
  /** The run's worker is gone: the session is placed again, unless it was stopping. */
  | { type: 'LoseRun'; runId: string; reason: string }
  | { type: 'StopSession'; reason: 'user' }
  /** A timer may have run out: stops the session only if, by its state, it has. */
  | { type: 'ExpireSession'; now: Date; limits?: SessionLimits }
  | ({ type: 'RecordLogin' } & SshLogin)
  | { type: 'RecordActivity'; runId: string; active: boolean };

const reject = (code: DomainError['code'], message: string): never => {
  throw new DomainError(code, message);
};

const MINUTE = 60_000;

/**
 * The platform's own limits on a session's passage: from its placement to its run starting on
 * the worker (an image pull included), and from a stop to the worker's word that a run which
 * never started is gone.
 */
export interface SessionLimits {
  startMs: number;
  stopMs: number;
}

export const DEFAULT_SESSION_LIMITS: SessionLimits = { startMs: 30 * MINUTE, stopMs: 5 * MINUTE };

/**
 * A timer of a session, and when it runs out: a stop reason, or `stopTimeout` (a run that never
 * started, whose worker has not answered a stop).
 */
export interface SessionDeadline {
  reason: Exclude<SessionStopReason, 'user'> | 'stopTimeout';
  at: Date;
}

/**
 * The first timer to run out for a session: for one starting, the start limit; for one running,
 * never connected, idle after its last channel closed, or its hard cap; for one stopping whose
 * run never started, the stop limit. A run that started has no stop deadline: its GPUs are its
 * own until its worker ends it or is lost, as something may still be using them.
 */
export function sessionDeadline(
  state: SessionState,
  limits: SessionLimits = DEFAULT_SESSION_LIMITS,
): SessionDeadline | null {
  const run = runHolder(state);
  if (state.status === 'starting' && run) {
    return { reason: 'startTimeout', at: new Date(Date.parse(run.assignedAt) + limits.startMs) };
  }
  if (state.status === 'stopping' && run && run.startedAt === null && state.stoppingSince) {
    return {
      reason: 'stopTimeout',
      at: new Date(Date.parse(state.stoppingSince) + limits.stopMs),
    };
  }
  if (state.status !== 'running' || !state.timers || !state.startedAt) return null;
  const started = Date.parse(state.startedAt);
  const deadlines: SessionDeadline[] = [
    { reason: 'maxDuration', at: new Date(started + state.timers.maxMin * MINUTE) },
  ];
  if (state.connectedAt === null) {
    deadlines.push({
      reason: 'neverConnected',
      at: new Date(started + state.timers.connectMin * MINUTE),
    });
  } else if (!state.active && state.idleSince) {
    deadlines.push({
      reason: 'idle',
      at: new Date(Date.parse(state.idleSince) + state.timers.idleMin * MINUTE),
    });
  }
  return deadlines.reduce((a, b) => (b.at < a.at ? b : a));
}

function stop(state: SessionState, reason: SessionStopReason): SessionEvent[] {
  const run = runHolder(state);
  if (!run) {
    return [
      { type: 'SessionStopRequested', data: { reason, runId: null, workerId: null } },
      { type: 'SessionStopped', data: { runId: null } },
    ];
  }
  return [
    { type: 'SessionStopRequested', data: { reason, runId: run.id, workerId: run.workerId } },
  ];
}

function heldRun(state: SessionState, runId: string) {
  const run = runHolder(state);
  if (!run || run.id !== runId) {
    return reject('STALE_RUN', `run ${runId} no longer holds session ${state.id}`);
  }
  return run;
}

/** Decides what a command on a session means, as events; throws `DomainError` when it may not. */
export function decideSession(command: SessionCommand, state: SessionState): SessionEvent[] {
  if (command.type !== 'RequestSession' && state.status === 'none') {
    return reject('SESSION_NOT_FOUND', `session ${state.id} does not exist`);
  }
  switch (command.type) {
    case 'RequestSession':
      if (state.status !== 'none') {
        return reject('SESSION_EXISTS', `session ${state.id} already exists`);
      }
      return [
        {
          type: 'SessionRequested',
          data: {
            owner: command.owner,
            spec: command.spec,
            timers: command.timers,
            ...(command.code && { code: command.code }),
            ...(command.image && { image: command.image }),
            ...(command.team !== undefined && { team: command.team }),
            ...(command.spec.image !== undefined && !command.image && { build: true }),
          },
        },
      ];
    case 'StartBuild':
    case 'ReclaimBuild': {
      const holder = command.type === 'StartBuild' ? null : command.goneBuilderId;
      if (state.status !== 'building' || state.builderId !== holder) {
        return reject(
          'INVALID_TRANSITION',
          `session ${state.id} is not ${holder ? `being built by ${holder}` : 'waiting for a build'}`,
        );
      }
      return [{ type: 'SessionBuildStarted', data: { builderId: command.builderId } }];
    }
    case 'CompleteBuild':
    case 'FailBuild':
      if (state.status !== 'building' || state.builderId !== command.builderId) {
        return reject(
          'INVALID_TRANSITION',
          `session ${state.id} is not being built by ${command.builderId}`,
        );
      }
      return command.type === 'CompleteBuild'
        ? [{ type: 'SessionBuilt', data: { image: command.image, durationMs: command.durationMs } }]
        : [{ type: 'SessionFailed', data: { runId: null, failure: command.failure } }];
    case 'AssignSession': {
      if (state.status !== 'queued') {
        return reject('INVALID_TRANSITION', `session ${state.id} is ${state.status}, not queued`);
      }
      const { type: _type, ...data } = command;
      return [{ type: 'SessionAssigned', data: { ...data, run: state.runs.length + 1 } }];
    }
    case 'StartRun': {
      const run = heldRun(state, command.runId);
      if (run.startedAt !== null || state.status === 'stopping') return [];
      return [{ type: 'SessionStarted', data: { runId: run.id } }];
    }
    case 'EndRun': {
      heldRun(state, command.runId);
      if (state.status === 'stopping' || !command.failure) {
        return [{ type: 'SessionStopped', data: { runId: command.runId } }];
      }
      return [{ type: 'SessionFailed', data: { runId: command.runId, failure: command.failure } }];
    }
    case 'LoseRun': {
      heldRun(state, command.runId);
      if (state.status === 'stopping') {
        return [{ type: 'SessionStopped', data: { runId: command.runId } }];
      }
      return [{ type: 'SessionRequeued', data: { runId: command.runId, reason: command.reason } }];
    }
    case 'StopSession':
      if (sessionEnded(state.status)) {
        return reject('SESSION_ENDED', `session ${state.id} has already ${state.status}`);
      }
      if (state.status === 'stopping') return [];
      return stop(state, command.reason);
    case 'ExpireSession': {
      const deadline = sessionDeadline(state, command.limits);
      if (!deadline || deadline.at > command.now) return [];
      // A run that never started, on a worker that does not answer: it is taken for gone.
      if (deadline.reason === 'stopTimeout') {
        return [{ type: 'SessionStopped', data: { runId: runHolder(state)?.id ?? null } }];
      }
      return stop(state, deadline.reason);
    }
    case 'RecordLogin': {
      const { type: _type, reason, ...data } = command;
      return [{ type: 'SessionLogin', data: { ...data, ...(reason !== undefined && { reason }) } }];
    }
    case 'RecordActivity': {
      const run = currentRun(state);
      if (!run || run.id !== command.runId || run.endedAt !== null) return [];
      if (state.active === command.active) return [];
      return [{ type: 'SessionActivity', data: { runId: run.id, active: command.active } }];
    }
    default:
      return assertNever(command);
  }
}
