import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import {
  dockerAt,
  DockerRuntime,
  DEFAULT_LOG_LIMIT_BYTES,
  JOB_IDS,
  MemoryCgroups,
  NoGpuInventory,
  NvidiaSmiInventory,
  ProcessRuntime,
  SAFE_PATH,
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
  /** The memory placement shares out among the worker's attempts, in GiB. */
  memoryGb?: string;
  sandbox?: string;
  heartbeatMs?: string;
  simulateRuntime?: boolean;
  /** How attempts run: `process` (on the host, the default) or `docker` (in containers). */
  runtime?: string;
  /** Where other workers reach this one (gang jobs' `MASTER_ADDR`): its host name unless said. */
  address?: string;
}

/** Where a worker of the Docker runtime finds its engine and registry. */
export interface DockerSettings {
  /** `unix:///path/to/docker.sock`. */
  host: string;
  registry?: string;
  username?: string;
  password?: string;
  /** The containers' network: `none` unless said. */
  network?: string;
}

async function inventoryFor(flags: WorkerFlags): Promise<GpuInventory> {
  if (flags.simulateGpus) return SimulatedInventory.parse(flags.simulateGpus);
  const smi = new NvidiaSmiInventory();
  return (await smi.available()) ? smi : new NoGpuInventory();
}

/** The uids jobs run as: `TRAINYARD_JOB_UIDS` (`FIRST-LAST`), or the default range. */
export function uidRange(env: NodeJS.ProcessEnv): { first: number; count: number } {
  const raw = env.TRAINYARD_JOB_UIDS;
  if (!raw) return DEFAULT_UID_RANGE;
  const m = /^(\d+)-(\d+)$/.exec(raw);
  const [first, last] = m ? [Number(m[1]), Number(m[2])] : [0, -1];
  if (first < JOB_IDS.first || last < first || last > JOB_IDS.last)
    throw new CliError(
      `TRAINYARD_JOB_UIDS must be FIRST-LAST, from ${JOB_IDS.first} to ${JOB_IDS.last}, not "${raw}"`,
    );
  return { first, count: last - first + 1 };
}

/** How much of an attempt's log is kept: `TRAINYARD_LOG_LIMIT_MB`, or 1 GiB. */
export function logLimitBytes(env: NodeJS.ProcessEnv): number {
  const raw = env.TRAINYARD_LOG_LIMIT_MB;
  if (raw === undefined || raw === '') return DEFAULT_LOG_LIMIT_BYTES;
  const mb = /^\d{1,9}$/.test(raw) ? Number(raw) : 0;
  if (mb < 1)
    throw new CliError(
      `TRAINYARD_LOG_LIMIT_MB must be a whole number of MiB, 1 or more, not "${raw}"`,
    );
  return mb * 1024 ** 2;
}

/**
 * A worker running as root runs each job as a uid of its own, and ends what that uid leaves
 * running through `setpriv`; without it, it refuses to start. Elsewhere jobs run as the
 * worker's user.
 */
function jobUsers(runtime: ProcessRuntime): JobUsers | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    execFileSync('setpriv', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new CliError(
      'the worker runs as root and runs each job as a user of its own, whose leftover processes it ends with setpriv (util-linux), which is missing: apt-get install -y util-linux',
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

/**
 * The Docker settings of a worker from the environment (`TRAINYARD_DOCKER_HOST`, the registry
 * and its login, `TRAINYARD_DOCKER_NETWORK`), over what the stack it belongs to runs.
 */
export function dockerSettings(
  env: NodeJS.ProcessEnv,
  stack?: { dockerHost?: string; registry?: string },
): DockerSettings | undefined {
  const host = env.TRAINYARD_DOCKER_HOST ?? stack?.dockerHost;
  if (!host) return undefined;
  const registry = env.TRAINYARD_REGISTRY ?? stack?.registry;
  return {
    host,
    ...(registry && { registry }),
    ...(env.TRAINYARD_REGISTRY_USERNAME && { username: env.TRAINYARD_REGISTRY_USERNAME }),
    ...(env.TRAINYARD_REGISTRY_PASSWORD && { password: env.TRAINYARD_REGISTRY_PASSWORD }),
    ...(env.TRAINYARD_DOCKER_NETWORK && { network: env.TRAINYARD_DOCKER_NETWORK }),
  };
}

/**
 * The Docker runtime: containers on the engine `docker` names, pulling from its registry. GPUs
 * go to containers by UUID through the NVIDIA runtime, unless they are simulated. As root,
 * each attempt's container runs as a uid of its own, as a process attempt would.
 */
async function dockerRuntime(
  name: string,
  docker: DockerSettings | undefined,
  inventory: GpuInventory,
): Promise<{ runtime: DockerRuntime; users?: JobUsers }> {
  if (!docker) {
    throw new CliError(
      'the Docker runtime needs a Docker engine: set TRAINYARD_DOCKER_HOST (unix:///path/to/docker.sock), or run `up --runtime docker`, which starts one',
      'NO_DOCKER',
    );
  }
  const client = dockerAt(docker.host);
  await client.ping().catch((err: unknown) => {
    throw new CliError(
      `cannot reach the Docker engine at ${docker.host}: ${(err as Error).message}`,
      'NO_DOCKER',
    );
  });
  const gpus = await inventory.list();
  const runtime = new DockerRuntime({
    docker: client,
    workerName: name,
    network: docker.network ?? 'none',
    gpuDevices: gpus.some((g) => g.simulated) || gpus.length === 0 ? 'none' : 'nvidia',
    ...(docker.registry &&
      docker.username &&
      docker.password && {
        auth: {
          username: docker.username,
          password: docker.password,
          serveraddress: docker.registry,
        },
      }),
  });
  if (process.getuid?.() !== 0) return { runtime };
  const { first, count } = uidRange(process.env);
  // A container's processes end with it: there is nothing of a uid's to end on the host.
  return { runtime, users: new JobUsers(async () => undefined, first, count) };
}

/** Worker options from command-line flags, with defaults for this host. */
export async function workerOptions(
  flags: WorkerFlags,
  docker?: DockerSettings,
): Promise<WorkerOptions> {
  const name = flags.name ?? 'local';
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name))
    throw new CliError('--name may hold letters, digits, _ and - only');
  const kind = flags.runtime ?? 'process';
  if (kind !== 'process' && kind !== 'docker')
    throw new CliError(`--runtime is process or docker, not "${kind}"`, 'BAD_RUNTIME');
  const inventory = await inventoryFor(flags);
  if (kind === 'docker') {
    const { runtime, users } = await dockerRuntime(name, docker, inventory);
    return { ...common(flags, name), inventory, runtime, ...(users && { users }) };
  }
  if (!flags.simulateRuntime) needPerl();
  const processes = flags.simulateRuntime
    ? null
    : new ProcessRuntime(process.env, SAFE_PATH, MemoryCgroups.here(), logLimitBytes(process.env));
  const users = processes ? jobUsers(processes) : undefined;
  return {
    ...common(flags, name),
    inventory,
    runtime: processes ?? new SimulatedRuntime(),
    ...(users && { users }),
  };
}

/** `--memory-gb` in bytes; a value that is not a positive number is refused. */
function memoryBytesOf(gb: string): number {
  const n = Number(gb);
  if (!(n > 0) || !Number.isFinite(n)) {
    throw new CliError(`--memory-gb: expected a positive number of GiB, got ${JSON.stringify(gb)}`);
  }
  return Math.floor(n * 1024 ** 3);
}

/** What every worker's options hold, whatever its runtime. */
function common(flags: WorkerFlags, name: string) {
  const address = addressOf(flags);
  return {
    name,
    cpuSlots: flags.cpuSlots !== undefined ? Number(flags.cpuSlots) : availableParallelism(),
    ...(flags.memoryGb !== undefined && { memoryBytes: memoryBytesOf(flags.memoryGb) }),
    sandboxRoot: flags.sandbox ?? join(sharedStateDir(homeDirOf(), 'sandboxes'), name),
    heartbeatMs: Number(flags.heartbeatMs ?? 2_000),
    outputSyncMs: 2_000,
    killGraceMs: 10_000,
    timeLimitMarginMs: 60_000,
    version: VERSION,
    ...(address && { address }),
  };
}

/** `--address` (or `TRAINYARD_WORKER_ADDRESS`), checked: a host name or an IP address. */
function addressOf(flags: WorkerFlags): string | undefined {
  const address = flags.address ?? process.env.TRAINYARD_WORKER_ADDRESS;
  if (address !== undefined && !/^[A-Za-z0-9][A-Za-z0-9.:-]{0,254}$/.test(address)) {
    throw new CliError(`--address must be a host name or an IP address, not "${address}"`);
  }
  return address;
}
