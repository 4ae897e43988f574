import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@trainyard/testkit';

export const BIN = resolve(fileURLToPath(new URL('../../cli/bin/trainyard.js', import.meta.url)));

/** How a program ran: its exit status (1 when it could not run) and what it wrote. */
export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program without blocking this process, which serves the stack. */
export function runProgram(
  file: string,
  args: string[],
  opts: { env: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string },
): Promise<Run> {
  return new Promise((done) => {
    execFile(
      file,
      args,
      { timeout: opts.timeoutMs ?? 30_000, env: opts.env, ...(opts.cwd && { cwd: opts.cwd }) },
      (err, stdout, stderr) =>
        done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * What the CLI runs with for a user of the API at `apiUrl` with `token`: its config and state
 * under `dir`, nothing of this machine's user.
 */
export function cliEnv(apiUrl: string, token: string, dir: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    TRAINYARD_API_URL: apiUrl,
    TRAINYARD_TOKEN: token,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_STATE_HOME: join(dir, 'state'),
  };
}

/** Runs the `trainyard` CLI as a user would, with the environment given (and nothing else). */
export function runCli(
  args: string[],
  opts: { env: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string },
): Promise<Run> {
  return runProgram(process.execPath, [BIN, ...args], opts);
}

/** A Trainyard service in a process of its own, to kill -9 like a crash would. */
export interface ServiceProcess {
  child: ChildProcess;
  /** SIGKILL, and wait for it to be gone. */
  kill9(): Promise<void>;
  /** SIGTERM, and wait for a clean exit. */
  stop(): Promise<void>;
}

export function startService(args: string[], env: NodeJS.ProcessEnv): ServiceProcess {
  const child = spawn(process.execPath, [BIN, ...args], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, TRAINYARD_LOG_LEVEL: 'error', ...env },
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const signal = async (s: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(s);
    await exited;
  };
  return { child, kill9: () => signal('SIGKILL'), stop: () => signal('SIGTERM') };
}

/**
 * A worker that enrols with a one-time token at `apiUrl`, keeping its key under `dir/home` and
 * its sandboxes under `dir/sandboxes`.
 */
export function startEnrollingWorker(
  name: string,
  opts: { token: string; apiUrl: string; dir: string; env?: NodeJS.ProcessEnv },
): ServiceProcess {
  return startService(
    [
      'worker',
      '--name',
      name,
      '--token',
      opts.token,
      '--api',
      opts.apiUrl,
      '--cpu-slots',
      '1',
      '--heartbeat-ms',
      '500',
      '--sandbox',
      join(opts.dir, 'sandboxes'),
    ],
    { TRAINYARD_HOME: join(opts.dir, 'home'), ...opts.env },
  );
}

/**
 * A worker in a process of its own with CPU slots, its sandboxes under `sandboxRoot/name`; with
 * `docker`, of the Docker runtime on that engine and registry.
 */
export function startWorkerProcess(
  name: string,
  opts: {
    natsUrl: string;
    sandboxRoot: string;
    heartbeatMs?: number;
    docker?: { host: string; registry: string };
    /** Simulated GPUs, as `--simulate-gpus` takes them (`2x24GiB`). */
    simulateGpus?: string;
    /** Where other workers reach it (`--address`). */
    address?: string;
  },
): ServiceProcess {
  return startService(
    [
      'worker',
      '--name',
      name,
      '--cpu-slots',
      '1',
      ...(opts.heartbeatMs ? ['--heartbeat-ms', String(opts.heartbeatMs)] : []),
      '--sandbox',
      join(opts.sandboxRoot, name),
      ...(opts.docker ? ['--runtime', 'docker'] : []),
      ...(opts.simulateGpus ? ['--simulate-gpus', opts.simulateGpus] : []),
      ...(opts.address ? ['--address', opts.address] : []),
    ],
    {
      TRAINYARD_NATS_URL: opts.natsUrl,
      ...(opts.docker && {
        TRAINYARD_DOCKER_HOST: opts.docker.host,
        TRAINYARD_REGISTRY: opts.docker.registry,
      }),
    },
  );
}

/** Worker processes a test starts, each in a sandbox of its own under `sandboxRoot`. */
export class WorkerProcesses {
  readonly all: ServiceProcess[] = [];
  /** The last process started under each name. */
  readonly byName = new Map<string, ServiceProcess>();

  constructor(
    private readonly opts: () => Omit<Parameters<typeof startWorkerProcess>[1], 'sandboxRoot'> & {
      sandboxRoot: string;
    },
  ) {}

  start(name: string): ServiceProcess {
    const w = startWorkerProcess(name, this.opts());
    this.all.push(w);
    this.byName.set(name, w);
    return w;
  }

  /**
   * The process group an attempt runs in, as its worker recorded it in the sandbox (the attempt
   * itself runs in a PID namespace of its own, where its pids mean nothing here).
   */
  attemptPid(workerName: string, jobId: string, attempt = 1): Promise<number> {
    const file = join(this.opts().sandboxRoot, workerName, `${jobId}-${attempt}`, 'attempt.pid');
    return waitFor(
      `the process group of ${jobId}-${attempt} on ${workerName}`,
      async () => Number(await readFile(file, 'utf8').catch(() => '')) || undefined,
      { timeoutMs: 30_000 },
    );
  }

  async killAll(): Promise<void> {
    for (const w of this.all) await w.kill9();
  }
}
