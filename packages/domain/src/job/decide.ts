import type {
  BlobRef,
  BuiltImage,
  CodeArchive,
  Failure,
  HoldBy,
  JobEvent,
  JobSpec,
  JobStatus,
  OutputFile,
  Placement,
  SshLogin,
} from '@trainyard/events';
import { type BackoffPolicy, DEFAULT_BACKOFF } from '../backoff.ts';
import { assertNever, DomainError } from '../errors.ts';
import { classifyExit, exitCodeOf, failure, type ProcessExit } from '../failures.ts';
import { decideDependencies } from './dependencies.ts';
import { endAttempt, liveAttempt, liveMember } from './ends.ts';
import { gangSize } from './gang.ts';
import { servicePortCount } from './service.ts';
import { abandonGang, decideMemberStart } from './gang-decide.ts';
import { decideHold, decideRelease } from './holds.ts';
import {
  decideShardsEnded,
  decideSharded,
  type ShardCommand,
  type ShardSubmission,
} from './shards.ts';
import { decidePreempt, decideTimeLimit, preemptedAttempt } from './stops.ts';
import { probeOutcome, type ProbeReport } from './probe.ts';
import { awaitsPlacement, isTerminal, probesNext, slotHolder, type JobState } from './state.ts';
import { needsBuild, needsEstimate } from './needs.ts';

/** Commands on a job. Time and randomness arrive inside them; `decide` has neither. */
export type JobCommand =
  | ({
      type: 'SubmitJob';
      owner: string;
      spec: JobSpec;
      code?: CodeArchive;
      /** Submits it held, by its owner or an admin: it is not placed until released. */
      hold?: HoldBy;
      /** The team its GPUs are charged to, as the API decided from its owner's teams. */
      team?: string;
    } & Partial<Pick<ShardSubmission, 'shardOf' | 'built'>>)
  | { type: 'StartBuild'; builderId: string }
  /** Takes over a build whose builder is gone. */
  | { type: 'ReclaimBuild'; builderId: string; goneBuilderId: string }
  | { type: 'CompleteBuild'; artifact: BlobRef; image?: BuiltImage; durationMs: number }
  | { type: 'FailBuild'; failure: Failure }
  | ({
      type: 'AssignJob';
      attemptId: string;
      /** A gang job's other members, ranks 1 and on, each on a worker of its own. */
      members?: Placement[];
      /** A service's ports on its worker, as many as its spec asks for. */
      ports?: number[];
    } & Placement)
  | { type: 'StartAttempt'; attemptId: string; pid?: number }
  | { type: 'SyncOutputs'; attemptId: string; files: OutputFile[] }
  | {
      type: 'FinishAttempt';
      attemptId: string;
      exit: ProcessExit;
      durationMs: number;
      /** Its worker stopped it when asked to: it did not end by itself. */
      stopped?: boolean;
      /** Its worker stopped it itself past the job's time limit, no stop having come. */
      timeLimited?: boolean;
      /** Its worker stopped it, a service, for failing its health check: why. */
      unhealthy?: string;
      /** Its health check had never answered healthy. */
      neverHealthy?: boolean;
      now: Date;
      jitter: number;
      backoff?: BackoffPolicy;
    }
  | {
      type: 'FinishProbe';
      attemptId: string;
      exit: ProcessExit;
      /** What the probe wrote, null when no Python process of the command started it. */
      report: ProbeReport | null;
      /** The worker stopped the probe after its time limit. */
      timedOut: boolean;
      durationMs: number;
      now: Date;
      jitter: number;
    }
  | { type: 'FailAttempt'; attemptId: string; failure: Failure; now: Date; jitter: number }
  /**
   * Ends a gang job's attempt whose members did not all start within `acceptMs` of its
   * assignment: all are released, and the job is queued again.
   */
  | { type: 'AbandonGang'; attemptId: string; now: Date; acceptMs: number; jitter: number }
  | { type: 'CancelJob' }
  /**
   * How the jobs this one depends on stand, as the log has them (`none`: not in the log): all
   * succeeded, it may be placed; one failed or cancelled, it fails.
   */
  | { type: 'ResolveDependencies'; outcomes: Record<string, JobStatus | 'none'> }
  /** Stops the running attempt once it has run the job's time limit; `now` is the clock's. */
  | { type: 'EnforceTimeLimit'; now: Date }
  /** Stops the running attempt of a preemptible job to make room for `by`. */
  | { type: 'PreemptJob'; attemptId: string; by: string }
  /** Sets the job's priority; who may raise it is the API's to say. */
  | { type: 'ChangePriority'; priority: number }
  /** Keeps a waiting job from being placed until released. */
  | { type: 'HoldJob'; by: HoldBy; reason: string }
  /** Lifts the job's hold: one an admin put on it needs an admin. */
  | { type: 'ReleaseJob'; by: HoldBy }
  /** A login through the SSH gateway to a shell beside the job, as the gateway saw it. */
  | ({ type: 'RecordLogin' } & SshLogin)
  | ShardCommand;

const reject = (code: DomainError['code'], message: string): never => {
  throw new DomainError(code, message);
};

/** Decides what a command on a job means, as events; throws `DomainError` when it may not. */
export function decideJob(command: JobCommand, state: JobState): JobEvent[] {
  if (command.type !== 'SubmitJob' && state.status === 'none') {
    return reject('JOB_NOT_FOUND', `job ${state.id} does not exist`);
  }
  switch (command.type) {
    case 'SubmitJob':
      if (state.status !== 'none') return reject('JOB_EXISTS', `job ${state.id} already exists`);
      return [
        {
          type: 'JobSubmitted',
          data: {
            owner: command.owner,
            spec: command.spec,
            ...(command.code && { code: command.code }),
            build: !command.shardOf && needsBuild(command.spec, command.code),
            // An array job is not run, and its shards take their GPUs whole: no probe each; nor
            // is a gang probed, whose members measured alone would not run as they do together.
            estimate:
              !command.shardOf &&
              !command.spec.shards &&
              (command.spec.nodes ?? 1) === 1 &&
              needsEstimate(command.spec),
            ...(command.hold && { hold: command.hold }),
            ...(command.team !== undefined && { team: command.team }),
            ...(command.shardOf && { shardOf: command.shardOf }),
            ...(command.built && { built: command.built }),
          },
        },
      ];
    case 'StartBuild':
      if (state.status !== 'submitted') {
        return reject('INVALID_TRANSITION', `job ${state.id} is ${state.status}, not submitted`);
      }
      return [{ type: 'JobBuildStarted', data: { builderId: command.builderId } }];
    case 'ReclaimBuild':
      if (state.status !== 'building' || state.builderId !== command.goneBuilderId) {
        return reject(
          'INVALID_TRANSITION',
          `job ${state.id} is not being built by ${command.goneBuilderId}`,
        );
      }
      return [{ type: 'JobBuildStarted', data: { builderId: command.builderId } }];
    case 'CompleteBuild':
    case 'FailBuild':
      if (state.status !== 'building') {
        return reject('INVALID_TRANSITION', `job ${state.id} is ${state.status}, not building`);
      }
      return command.type === 'CompleteBuild'
        ? [
            {
              type: 'JobBuilt',
              data: {
                artifact: command.artifact,
                ...(command.image && { image: command.image }),
                durationMs: command.durationMs,
              },
            },
          ]
        : [{ type: 'JobBuildFailed', data: { failure: command.failure } }];
    case 'AssignJob': {
      if (!awaitsPlacement(state)) {
        return reject('INVALID_TRANSITION', `job ${state.id} is ${state.status}, not queued`);
      }
      const { type: _t, members, ...rest } = command;
      const nodes = state.spec?.nodes ?? 1;
      const workers = new Set([command.workerId, ...(members ?? []).map((m) => m.workerId)]);
      if ((members?.length ?? 0) !== nodes - 1 || workers.size !== nodes) {
        return reject('INVALID_TRANSITION', `job ${state.id} runs on ${nodes} workers at once`);
      }
      if ((command.ports?.length ?? 0) !== servicePortCount(state.spec)) {
        return reject(
          'INVALID_TRANSITION',
          `job ${state.id} is given ${servicePortCount(state.spec)} ports`,
        );
      }
      return [
        {
          type: 'JobAssigned',
          data: {
            ...rest,
            attempt: state.attempts.length + 1,
            ...(probesNext(state) && { probe: true }),
            ...(members && members.length > 0 && { members }),
          },
        },
      ];
    }
    case 'StartAttempt': {
      const { attempt, member } = liveMember(state, command.attemptId);
      if (gangSize(attempt) > 1) return decideMemberStart(state, attempt, member.rank);
      if (state.cancelRequested) return [{ type: 'JobCancelled', data: { attemptId: attempt.id } }];
      // Preempted before it started: it never starts (its worker releases it), and queues again.
      if (state.preemptRequested && attempt.status === 'assigned') {
        return [preemptedAttempt(attempt.id, null, 0, new Date(attempt.assignedAt))];
      }
      // A start said twice (its first answer lost on the way back) is the start already recorded.
      if (attempt.status === 'running') return [];
      if (attempt.status !== 'assigned') {
        return reject('INVALID_TRANSITION', `attempt ${attempt.id} is already ${attempt.status}`);
      }
      return [
        {
          type: 'JobStarted',
          data: {
            attemptId: command.attemptId,
            ...(command.pid !== undefined && { pid: command.pid }),
          },
        },
      ];
    }
    case 'SyncOutputs': {
      const { attempt, member } = liveMember(state, command.attemptId);
      if (attempt.probe) {
        return reject(
          'INVALID_TRANSITION',
          `attempt ${command.attemptId} is a probe: it keeps no outputs`,
        );
      }
      // A gang keeps the outputs of its rank 0, as torch's convention has it save them.
      if (member.rank !== 0) return [];
      return [
        { type: 'JobOutputsSynced', data: { attemptId: command.attemptId, files: command.files } },
      ];
    }
    case 'FinishProbe': {
      const attempt = liveAttempt(state, command.attemptId);
      if (!attempt.probe) {
        return reject('INVALID_TRANSITION', `attempt ${attempt.id} is not a probe`);
      }
      const outcome = probeOutcome(command.exit, command.report, command.timedOut);
      if ('estimate' in outcome && !state.cancelRequested) {
        return [
          {
            type: 'JobEstimated',
            data: {
              attemptId: attempt.id,
              estimate: outcome.estimate,
              durationMs: command.durationMs,
            },
          },
        ];
      }
      const why = 'failure' in outcome ? outcome.failure : null;
      // A command the probe could not watch ended as it would have: its exit code says nothing.
      const unwatched = why?.reason === 'probeNotPython' || why?.reason === 'probeNoStep';
      return endAttempt(state, attempt.id, {
        failure: why,
        exitCode: unwatched ? null : exitCodeOf(command.exit),
        durationMs: command.durationMs,
        now: command.now,
        jitter: command.jitter,
        policy: DEFAULT_BACKOFF,
      });
    }
    case 'FinishAttempt':
      if (liveAttempt(state, command.attemptId).probe) {
        return reject(
          'INVALID_TRANSITION',
          `attempt ${command.attemptId} is a probe: it ends with FinishProbe`,
        );
      }
      return endAttempt(
        state,
        command.attemptId,
        {
          failure: command.unhealthy
            ? failure(command.neverHealthy ? 'neverHealthy' : 'unhealthy', command.unhealthy)
            : classifyExit(command.exit),
          exitCode: exitCodeOf(command.exit),
          durationMs: command.durationMs,
          now: command.now,
          jitter: command.jitter,
          policy: command.backoff ?? DEFAULT_BACKOFF,
        },
        {
          // One that ended by itself within the limit, as its worker timed it, ended as it did,
          // however late its report came.
          endedInTime:
            !command.stopped && command.durationMs < (state.spec?.timeLimit ?? Infinity) * 1000,
          stopped: command.stopped === true,
          pastLimit: command.timeLimited === true && state.spec?.timeLimit !== undefined,
        },
      );
    case 'FailAttempt':
      return endAttempt(state, command.attemptId, {
        failure: command.failure,
        exitCode: null,
        durationMs: 0,
        now: command.now,
        jitter: command.jitter,
        policy: DEFAULT_BACKOFF,
      });
    case 'AbandonGang':
      return abandonGang(state, command.attemptId, command.now, command.acceptMs, command.jitter);
    case 'CancelJob': {
      if (isTerminal(state.status)) {
        return reject('JOB_FINISHED', `job ${state.id} already ${state.status}`);
      }
      const attempt = slotHolder(state);
      if (attempt) {
        if (state.cancelRequested) return [];
        return [
          {
            type: 'JobCancelRequested',
            data: { attemptId: attempt.id, workerId: attempt.workerId },
          },
        ];
      }
      return [{ type: 'JobCancelled', data: {} }];
    }
    case 'ResolveDependencies':
      return decideDependencies(state, command.outcomes);
    case 'EnforceTimeLimit':
      return decideTimeLimit(state, command.now);
    case 'PreemptJob':
      return decidePreempt(state, command.attemptId, command.by);
    case 'ChangePriority': {
      if (isTerminal(state.status)) {
        return reject('JOB_FINISHED', `job ${state.id} already ${state.status}`);
      }
      const previous = state.spec?.priority ?? 0;
      if (command.priority === previous) return [];
      return [{ type: 'JobPriorityChanged', data: { priority: command.priority, previous } }];
    }
    case 'HoldJob':
      return decideHold(state, command.by, command.reason);
    case 'ReleaseJob':
      return decideRelease(state, command.by);
    case 'RecordSharded':
      return decideSharded(state);
    case 'FinishShards':
      return decideShardsEnded(state, command.outcomes);
    case 'RecordLogin': {
      // An ended job's history is closed: anyone may knock at its name, and the log must not
      // grow with each knock.
      if (isTerminal(state.status)) return [];
      const { type: _type, reason, ...data } = command;
      return [{ type: 'JobLogin', data: { ...data, ...(reason !== undefined && { reason }) } }];
    }
    default:
      return assertNever(command);
  }
}
