import type { Estimate, Failure } from '@trainyard/events';
import { classifyExit, failure, type ProcessExit } from '../failures.ts';

/**
 * What Trainyard's probe wrapper writes as it watches a training script: how many optimizer
 * steps it saw, whether it stopped the script by its rule, and the peaks it measured.
 */
export interface ProbeReport {
  steps: number;
  /** The probe's stop rule was met and it ended the script. */
  done: boolean;
  device: 'cuda' | 'cpu';
  /** Peak CUDA memory reserved on one GPU; null when the script used no GPU. */
  peakVramBytes: number | null;
  peakRssBytes: number;
  stepMs: number | null;
}

export type ProbeOutcome = { estimate: Estimate } | { failure: Failure };

const SKIP = 'declare vramGb to place the job without a probe';

function describe(exit: ProcessExit): string {
  switch (exit.kind) {
    case 'exited':
      return `exited with code ${exit.exitCode}`;
    case 'signalled':
      return `was killed by ${exit.signal}`;
    default:
      return 'ended';
  }
}

/**
 * What a probe's end means: the job's estimate, or why it has none. A probe that could not run
 * is the platform's failure (and retries); one that ran and measured nothing is the job's.
 */
export function probeOutcome(
  exit: ProcessExit,
  report: ProbeReport | null,
  timedOut: boolean,
): ProbeOutcome {
  if (exit.kind !== 'exited' && exit.kind !== 'signalled') {
    return { failure: classifyExit(exit)! };
  }
  const finished = timedOut || (exit.kind === 'exited' && exit.exitCode === 0);
  if (report && report.steps > 0 && (report.done || finished)) {
    return {
      estimate: {
        vramBytes: Math.ceil(report.peakVramBytes ?? 0),
        ramBytes: Math.ceil(report.peakRssBytes),
        stepMs: report.stepMs,
        steps: report.steps,
        device: report.device,
      },
    };
  }
  if (!report) {
    const how = timedOut ? 'ran to the probe’s time limit' : describe(exit);
    return {
      failure: failure(
        'probeNotPython',
        `the command ${how} without starting a Python the probe could watch (it measures PyTorch training scripts; a command that sets PYTHONPATH itself, or runs python -I, -E or -S, hides them from it); ${SKIP}`,
      ),
    };
  }
  if (report.steps === 0 && finished) {
    const how = timedOut ? 'ran to the probe’s time limit' : 'ended';
    return {
      failure: failure(
        'probeNoStep',
        `the command ${how} without an optimizer step: the probe counts torch.optim steps; ${SKIP}`,
      ),
    };
  }
  return {
    failure: failure(
      'probeCrashed',
      `the command ${describe(exit)} during the probe, after ${report.steps} optimizer step${report.steps === 1 ? '' : 's'}`,
    ),
  };
}
