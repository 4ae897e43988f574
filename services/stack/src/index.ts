import type { StackOptions, Stack } from './stack.ts';
import type { DockerSettings, WorkerFlags } from './worker-options.ts';

export { registerServiceCommands } from './commands/services.ts';
export { registerOperatorCommands } from './commands/operator.ts';
export type { Stack, StackOptions } from './stack.ts';
export type { DockerSettings, WorkerFlags } from './worker-options.ts';

/*
 * The `trainyard` client loads this package for its server commands on every run, so the
 * services load only when one of them starts.
 */

/** The whole stack in this process: NATS, PostgreSQL, every service and local workers. */
export async function startStack(opts: StackOptions): Promise<Stack> {
  return (await import('./stack.ts')).startStack(opts);
}

/** A worker's options from its command-line flags and the environment. */
export async function workerOptions(flags: WorkerFlags, docker?: DockerSettings) {
  return (await import('./worker-options.ts')).workerOptions(flags, docker);
}
