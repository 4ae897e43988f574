import type { Failure, FailureKind } from '@trainyard/events';

/**
 * Every way an attempt or a build can fail, classified once: whose fault it is and whether
 * running it again could help. Add a reason here and nowhere else.
 */
export const FailureReasons = {
  nonZeroExit: { kind: 'user', retryable: false },
  killedBySignal: { kind: 'user', retryable: false },
  oomKilled: { kind: 'user', retryable: false },
  badArchive: { kind: 'user', retryable: false },
  setupFailed: { kind: 'user', retryable: false },
  /** The job's image could not be built from what the job brought (a requirement, a file). */
  buildFailed: { kind: 'user', retryable: false },
  /** The probe saw no Python process start: it measures PyTorch training scripts only. */
  probeNotPython: { kind: 'user', retryable: false },
  /** The probe's command ended (or ran out its time) without one optimizer step. */
  probeNoStep: { kind: 'user', retryable: false },
  /** The command failed while the probe watched it. */
  probeCrashed: { kind: 'user', retryable: false },
  /** A job it depends on failed or was cancelled: it never ran. */
  dependencyFailed: { kind: 'user', retryable: false },
  /** The attempt ran past the job's `timeLimit` and was stopped. */
  timeLimit: { kind: 'user', retryable: false },
  /** A shard of the array job failed: the array job fails once every shard has ended. */
  shardFailed: { kind: 'user', retryable: false },
  launchError: { kind: 'system', retryable: true },
  processLost: { kind: 'system', retryable: true },
  workerLost: { kind: 'system', retryable: true },
  workerStopped: { kind: 'system', retryable: true },
  buildInfrastructure: { kind: 'system', retryable: true },
  artifactUnavailable: { kind: 'system', retryable: true },
  /** Stopped to make room for work of a higher priority: queued again, no retry spent. */
  preempted: { kind: 'system', retryable: true },
  /**
   * A member of a gang job's attempt did not start within the acceptance timeout: every member
   * is released and the job queued again, without spending a retry (a few times at most).
   */
  gangIncomplete: { kind: 'system', retryable: true },
  /** A service's health check failed too many times in a row: it is stopped and started again. */
  unhealthy: { kind: 'user', retryable: true },
  /** The same, for a service whose health check never once answered healthy. */
  neverHealthy: { kind: 'user', retryable: true },
  /** A service's command exited by itself (services run until stopped): it is started again. */
  serviceExited: { kind: 'user', retryable: true },
  /** The attempt could not be sent to its worker, and sending it again would not help. */
  dispatchFailed: { kind: 'system', retryable: false },
} as const satisfies Record<string, { kind: FailureKind; retryable: boolean }>;
export type FailureReason = keyof typeof FailureReasons;

/** Failures that queue a job again without spending one of its retries: stops for other work. */
export const FREE_RETRIES: ReadonlySet<string> = new Set(['preempted', 'gangIncomplete']);

/** Builds a classified failure. */
export function failure(reason: FailureReason, message: string): Failure {
  const { kind, retryable } = FailureReasons[reason];
  return { kind, retryable, reason, message };
}

/** How a process ended, as a runtime reports it. */
export type ProcessExit =
  | { kind: 'exited'; exitCode: number }
  | { kind: 'signalled'; signal: string }
  | { kind: 'oom' }
  | { kind: 'launch-error'; message: string }
  /** The job's `setup` command failed; its command never ran. */
  | { kind: 'setup-failed'; exitCode: number }
  /** It ended while no worker watched it, without recording how. */
  | { kind: 'lost'; message: string };

/** Classifies a process exit; `null` means success. */
export function classifyExit(exit: ProcessExit): Failure | null {
  switch (exit.kind) {
    case 'exited':
      return exit.exitCode === 0
        ? null
        : failure('nonZeroExit', `the command exited with code ${exit.exitCode}`);
    case 'signalled':
      return failure('killedBySignal', `the command was killed by ${exit.signal}`);
    case 'oom':
      return failure('oomKilled', 'the command ran out of memory');
    case 'launch-error':
      return failure('launchError', exit.message);
    case 'setup-failed':
      return failure('setupFailed', `setup exited with code ${exit.exitCode}`);
    case 'lost':
      return failure('processLost', exit.message);
    default: {
      const never: never = exit;
      throw new Error(`unknown exit ${JSON.stringify(never)}`);
    }
  }
}

/** The exit code to record for an exit, where it has one. */
export function exitCodeOf(exit: ProcessExit): number | null {
  return exit.kind === 'exited' ? exit.exitCode : null;
}
