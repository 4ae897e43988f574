import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import {
  NoGpuInventory,
  NvidiaSmiInventory,
  ProcessRuntime,
  SimulatedInventory,
  SimulatedRuntime,
  type GpuInventory,
} from '@trainyard/runtime';
import { sharedStateDir } from '@trainyard/servers';
import { DEFAULT_UID_RANGE, JobUsers, type WorkerOptions } from '@trainyard/worker';
import { CliError, homeDirOf } from '@trainyard/cli';

const VERSION = '0.1.0';

export interface WorkerFlags {
  name?: string;
  simulateGpus?: string;
  cpuSlots?: string;
  sandbox?: string;
  heartbeatMs?: string;
  simulateRuntime?: boolean;
}

async function inventoryFor(flags: WorkerFlags): Promise<GpuInventory> {
  if (flags.simulateGpus) return SimulatedInventory.parse(flags.simulateGpus);
  const smi = new NvidiaSmiInventory();
  return (await smi.available()) ? smi : new NoGpuInventory();
}

/** The uids jobs run as: `TRAINYARD_JOB_UIDS` (`FIRST-LAST`), or the default range. */
function uidRange(env: NodeJS.ProcessEnv): { first: number; count: number } {
  const raw = env.TRAINYARD_JOB_UIDS;
  if (!raw) return DEFAULT_UID_RANGE;
  const m = /^(\d+)-(\d+)$/.exec(raw);
  const [first, last] = m ? [Number(m[1]), Number(m[2])] : [0, -1];
  if (first < 1000 || last < first)
    throw new CliError(`TRAINYARD_JOB_UIDS must be FIRST-LAST, from 1000 up, not "${raw}"`);
  return { first, count: last - first + 1 };
}

/**
 * A worker running as root runs each job as a uid of its own, through `setpriv`; without it,
 * it would run them as root, so it refuses to start. Elsewhere jobs run as the worker's user.
 */
function jobUsers(runtime: ProcessRuntime): JobUsers | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    execFileSync('setpriv', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new CliError(
      'the worker runs as root, and runs each job as a user of its own with setpriv (util-linux), which is missing: apt-get install -y util-linux',
      'NO_SETPRIV',
    );
  }
  const { first, count } = uidRange(process.env);
  return new JobUsers((uid) => runtime.endUser(uid), first, count);
}

/** The worker starts attempts through a Perl spawner: without perl, no attempt could start. */
function needPerl(): void {
  try {
    execFileSync('perl', ['-e', '1'], { stdio: 'ignore' });
  } catch {
    throw new CliError(
      'the worker starts attempts through perl (perl-base), which is missing: apt-get install -y perl-base',
      'NO_PERL',
    );
  }
}

/** Worker options from command-line flags, with defaults for this host. */
export async function workerOptions(flags: WorkerFlags): Promise<WorkerOptions> {
  const name = flags.name ?? 'local';
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name))
    throw new CliError('--name may hold letters, digits, _ and - only');
  if (!flags.simulateRuntime) needPerl();
  const processes = flags.simulateRuntime ? null : new ProcessRuntime();
  const users = processes ? jobUsers(processes) : undefined;
  return {
    name,
    inventory: await inventoryFor(flags),
    runtime: processes ?? new SimulatedRuntime(),
    ...(users && { users }),
    cpuSlots: flags.cpuSlots !== undefined ? Number(flags.cpuSlots) : availableParallelism(),
    sandboxRoot: flags.sandbox ?? join(sharedStateDir(homeDirOf(), 'sandboxes'), name),
    heartbeatMs: Number(flags.heartbeatMs ?? 2_000),
    outputSyncMs: 2_000,
    killGraceMs: 10_000,
    version: VERSION,
  };
}
