import type { ProcessExit } from '@trainyard/domain';
import type { LogStreamName, RunningAttempt, RunSpec, Runtime } from './types.ts';

/**
 * A runtime that runs nothing: each attempt "exits 0" after `runMs`, printing nothing. For benchmarks of the
 * control plane, where spawning processes would measure the host instead of Trainyard.
 * Workers that use it register their runtime as `simulated`.
 */
export class SimulatedRuntime implements Runtime {
  readonly kind = 'simulated';
  constructor(private readonly runMs = 0) {}

  async start(
    _spec: RunSpec,
    _onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt> {
    let finish!: (exit: ProcessExit) => void;
    const exited = new Promise<ProcessExit>((resolve) => (finish = resolve));
    const timer = setTimeout(() => finish({ kind: 'exited', exitCode: 0 }), this.runMs);
    return {
      pid: undefined,
      exited,
      kill: async () => {
        clearTimeout(timer);
        finish({ kind: 'signalled', signal: 'SIGTERM' });
      },
    };
  }
}
