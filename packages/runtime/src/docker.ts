import { chownSync, closeSync, fstatSync, openSync, writeSync, writeFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { constants as osConstants } from 'node:os';
import { basename, dirname, posix } from 'node:path';
import Docker from 'dockerode';
import type { ProcessExit } from '@trainyard/domain';
import { attemptEnv } from './env.ts';
import { notStarted } from './process.ts';
import { PAUSE } from './attempt-script.ts';
import { CHOOSE_DEFAULT_SIGNALS } from './default-signals.ts';
import { probeEnv } from './probe.ts';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import { openContainerChannel } from './container-channels.ts';
import {
  CONTAINER_WORK_DIR,
  confinedHost,
  containerAccount,
  Labels,
  type ConfineOptions,
} from './confine.ts';
import {
  imageEnv,
  startSessionContainer,
  type SessionContainer,
  type SessionRunSpec,
} from './session-container.ts';
import type { LogStreamName, RunningAttempt, RunSpec, Runtime } from './types.ts';

/** Where an attempt's outputs are, inside its container. */
export const CONTAINER_OUTPUT_DIR = '/trainyard/outputs';
/** Where a probe's wrapper is mounted in its container. */
export const CONTAINER_PROBE_DIR = '/trainyard/probe';
/** Where an attempt's metrics directory is mounted in its container. */
export const CONTAINER_METRICS_DIR = '/trainyard/metrics';
/** What a probe's command starts with: the wrapper's directory first on Python's path. */
const PROBE_PATH = `export PYTHONPATH="${CONTAINER_PROBE_DIR}\${PYTHONPATH:+:$PYTHONPATH}"`;
/**
 * How a container runs its command (`$1`, an argument, never part of the script): in a shell of its
 * own, started with SIGINT and SIGQUIT at their default where the image can (see
 * `DEFAULT_SIGNALS`), under a shell that a stop (SIGTERM from the container's init) reaches and
 * that sends it on to every other process of the container the job's user runs (`kill -1` spares
 * the init). Once stopped, it ends only when it is the container's last process besides the init,
 * so that a program under a shell that SIGTERM ends at once keeps its grace to save its work; the
 * engine's SIGKILL ends the grace, and a second stop changes nothing. Its variables are set only
 * once the command is forked, so a job's environment reaches the command whole and steers nothing
 * here.
 */
const RUN_COMMAND = [
  CHOOSE_DEFAULT_SIGNALS,
  '(exec "$@") & __ty_child=$!',
  '__ty_stopped=',
  `trap '[ -n "$__ty_stopped" ] || { __ty_stopped=1; kill -TERM -1 2>/dev/null; }' TERM INT HUP`,
  'while :; do',
  '  wait "$__ty_child"; __ty_code=$?; kill -0 "$__ty_child" 2>/dev/null || break',
  'done',
  'while [ -n "$__ty_stopped" ]; do',
  '  __ty_others=',
  '  for __ty_p in /proc/[0-9]*; do',
  '    case ${__ty_p#/proc/} in 1 | $$) ;; *) __ty_others=1 ;; esac',
  '  done',
  `  [ -n "$__ty_others" ] && ${PAUSE} || break`,
  'done',
  'exit "$__ty_code"',
].join('\n');
/** Whom an attempt's container runs as: its own user, else never root. */
const containerUser = (spec: RunSpec) => containerAccount(spec.user);

export interface DockerRuntimeOptions extends ConfineOptions {
  docker: Docker;
  /** Names the worker in its containers' labels, so that it finds its own after a restart. */
  workerName: string;
  /** Registry credentials for pulls; never logged. */
  auth?: { username: string; password: string; serveraddress: string };
}

/** A client of the Docker engine at `unix:///path/to/docker.sock`. */
export function dockerAt(host: string): Docker {
  return new Docker({ socketPath: host.replace(/^unix:\/\//, '') });
}

/** A container name for an attempt: its id, in the characters Docker allows. */
export const containerName = (attemptId: string) =>
  `trainyard-${attemptId.replace(/[^A-Za-z0-9_.-]/g, '_')}`;

/** The environment an attempt sees in its container. */
function containerEnv(spec: RunSpec): Record<string, string> {
  return attemptEnv({
    ...spec,
    workDir: CONTAINER_WORK_DIR,
    outputDir: CONTAINER_OUTPUT_DIR,
    ...(spec.metricsFile && {
      metricsFile: posix.join(CONTAINER_METRICS_DIR, basename(spec.metricsFile)),
    }),
    // Inside the container its GPUs are numbered from 0, in the order they were given.
    gpus: spec.gpus.map((_, i) => i),
  });
}

/**
 * How a container is made for an attempt: its image, its command as one argument (never
 * spliced into a shell line), confined (`confinedHost`), the output directory mounted, and
 * labels that name the job, the attempt and the worker.
 */
export function containerSpec(
  spec: RunSpec,
  opts: Pick<DockerRuntimeOptions, 'workerName' | 'network' | 'gpuDevices'>,
): Docker.ContainerCreateOptions {
  if (!spec.image) throw new Error(`attempt ${spec.attemptId} has no image to run`);
  const user = containerUser(spec);
  const env = containerEnv(spec);
  const host = confinedHost({ ...spec, user }, opts, env);
  if (spec.probe) Object.assign(env, probeEnv(spec.probe, CONTAINER_PROBE_DIR));
  return {
    name: containerName(spec.attemptId),
    Image: spec.image,
    // The command is the job's alone: a base image's entrypoint (a server's) would take it as arguments.
    Entrypoint: [''],
    // The shell above the command hears the stop, whatever signal the image would stop with.
    StopSignal: 'SIGTERM',
    Cmd: [
      '/bin/sh',
      '-c',
      spec.probe ? `${PROBE_PATH}\n${RUN_COMMAND}` : RUN_COMMAND,
      'sh',
      spec.command,
    ],
    User: `${user.uid}:${user.gid}`,
    WorkingDir: CONTAINER_WORK_DIR,
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: {
      [Labels.job]: spec.jobId,
      [Labels.attempt]: spec.attemptId,
      [Labels.worker]: opts.workerName,
    },
    HostConfig: {
      ...host,
      Binds: [
        `${spec.outputDir}:${CONTAINER_OUTPUT_DIR}:rw`,
        ...(spec.probe ? [`${spec.probe.dir}:${CONTAINER_PROBE_DIR}:rw`] : []),
        ...(spec.metricsFile ? [`${dirname(spec.metricsFile)}:${CONTAINER_METRICS_DIR}:rw`] : []),
      ],
    },
  };
}

/** How a container's end reads as a process exit. */
export function exitOfContainer(state: { ExitCode?: number; OOMKilled?: boolean }): ProcessExit {
  if (state.OOMKilled) return { kind: 'oom' };
  const code = state.ExitCode ?? 0;
  const signal =
    code > 128
      ? Object.entries(osConstants.signals).find(([, n]) => n === code - 128)?.[0]
      : undefined;
  return signal ? { kind: 'signalled', signal } : { kind: 'exited', exitCode: code };
}

const statusOf = (err: unknown) => (err as { statusCode?: number }).statusCode;

/**
 * Copies a container's output, stdout and stderr in the order Docker logged them, into the
 * attempt's log file and on to the worker: bytes up to `fileHas` are in the file already, and
 * bytes up to `shipped` are in the live log already.
 */
class ContainerLog {
  #seen = 0;
  #fd: number;
  readonly #fileHas: number;
  constructor(
    path: string,
    private readonly shipped: number,
    private readonly onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ) {
    this.#fd = openSync(path, 'a', 0o600);
    this.#fileHas = fstatSync(this.#fd).size;
  }

  write(stream: LogStreamName, chunk: Buffer): void {
    const start = this.#seen;
    this.#seen += chunk.length;
    if (this.#seen > this.#fileHas)
      writeSync(this.#fd, chunk.subarray(Math.max(0, this.#fileHas - start)));
    if (this.#seen > this.shipped)
      this.onOutput(stream, chunk.subarray(Math.max(0, this.shipped - start)));
  }

  close(): void {
    closeSync(this.#fd);
  }
}

/**
 * Runs attempts in containers on a Docker engine: each in its job's image, pulled by digest,
 * as a uid of its own. Its output is copied from Docker's log into the attempt's log file; its
 * end is the container's, which is kept until the worker has reported it (`remove`), so a
 * worker that restarts finds its containers by label and takes them over.
 */
export class DockerRuntime implements Runtime {
  readonly kind = 'docker';
  readonly limitsMemory = true;
  /** Ends the following of every attempt, when the runtime is closed. */
  readonly #closing = new AbortController();
  constructor(private readonly opts: DockerRuntimeOptions) {}

  /** Stops following the containers; they run on, for a worker that comes back to take over. */
  close(): void {
    this.#closing.abort();
  }

  async #pull(image: string): Promise<void> {
    try {
      await this.opts.docker.getImage(image).inspect();
      return;
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    const stream = await this.opts.docker.pull(
      image,
      this.opts.auth ? { authconfig: this.opts.auth } : {},
    );
    const events = await new Promise<{ error?: string }[]>((resolve, reject) =>
      this.opts.docker.modem.followProgress(
        stream,
        (err: Error | null, out: { error?: string }[]) => (err ? reject(err) : resolve(out)),
      ),
    );
    const failed = events.find((e) => e.error)?.error;
    if (failed) throw new Error(`the pull of ${image} failed: ${failed}`);
  }

  /**
   * A channel in the attempt's container, by `docker exec`, as the user it runs as, with the
   * image's environment and the attempt's.
   */
  async channel(spec: RunSpec, request: ChannelRequest): Promise<Channel> {
    const user = containerUser(spec);
    const image = spec.image ? await imageEnv(this.opts.docker, spec.image) : {};
    const place = {
      containerId: containerName(spec.attemptId),
      user: `${user.uid}:${user.gid}`,
      dir: CONTAINER_WORK_DIR,
      env: { ...image, ...containerEnv(spec) },
    };
    return openContainerChannel(this.opts.docker, place, request);
  }

  /** Starts a session's run in a container of its image, pulled by digest. */
  async startSession(spec: SessionRunSpec): Promise<SessionContainer> {
    await this.#pull(spec.image);
    return startSessionContainer(this.opts.docker, spec, this.opts);
  }

  async start(
    spec: RunSpec,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt> {
    let container: Docker.Container | null = null;
    try {
      await this.#pull(spec.image ?? '');
      const user = containerUser(spec);
      if (!spec.user) {
        chownSync(spec.outputDir, user.uid, user.gid);
        if (spec.probe) chownSync(spec.probe.dir, user.uid, user.gid);
        if (spec.metricsFile) chownSync(dirname(spec.metricsFile), user.uid, user.gid);
      }
      container = await this.opts.docker.createContainer(containerSpec(spec, this.opts));
      await container.start();
      return await this.#follow(container, spec, 0, onOutput);
    } catch (err) {
      // Nothing runs unwatched: a container that started but could not be followed goes.
      await container?.remove({ force: true, v: true }).catch(() => undefined);
      return notStarted(`the container could not start: ${(err as Error).message}`);
    }
  }

  async attach(
    spec: RunSpec,
    _pid: number,
    offset: number,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt | null> {
    const container = await this.#find(spec.attemptId);
    return container ? this.#follow(container, spec, offset, onOutput) : null;
  }

  async #find(attemptId: string): Promise<Docker.Container | null> {
    const found = await this.opts.docker.listContainers({
      all: true,
      filters: {
        label: [`${Labels.attempt}=${attemptId}`, `${Labels.worker}=${this.opts.workerName}`],
      },
    });
    return found[0] ? this.opts.docker.getContainer(found[0].Id) : null;
  }

  async #follow(
    container: Docker.Container,
    spec: RunSpec,
    shipped: number,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt> {
    const info = await container.inspect();
    const pid = info.State.Pid > 0 ? info.State.Pid : undefined;
    if (pid) writeFileSync(spec.pidFile, `${pid}\n`, { mode: 0o600 });
    const log = new ContainerLog(spec.logFile, shipped, onOutput);
    const abortSignal = this.#closing.signal;
    const raw = await container.logs({ follow: true, stdout: true, stderr: true, abortSignal });
    const sink = (stream: LogStreamName) =>
      new Writable({
        write(chunk: Buffer, _enc, done) {
          log.write(stream, chunk);
          done();
        },
      });
    const drained = new Promise<void>((resolve) => {
      raw.once('end', resolve);
      raw.once('close', resolve);
      raw.once('error', () => resolve());
    });
    this.opts.docker.modem.demuxStream(raw, sink('stdout'), sink('stderr'));
    const exited = (async (): Promise<ProcessExit> => {
      try {
        await container.wait({ abortSignal });
        await drained;
        const state = (await container.inspect()).State;
        return exitOfContainer(state);
      } catch (err) {
        // A closed runtime has let the attempt go: its end is for whoever takes it over.
        if (abortSignal.aborted) return new Promise<never>(() => undefined);
        return { kind: 'lost', message: `its container went away: ${(err as Error).message}` };
      } finally {
        log.close();
      }
    })();
    const kill = async (graceMs = 10_000) => {
      await container.stop({ t: Math.max(1, Math.ceil(graceMs / 1000)) }).catch((err: unknown) => {
        if (statusOf(err) !== 304 && statusOf(err) !== 404) throw err;
      });
      await exited;
    };
    return { pid, exited, kill };
  }

  /** Removes an attempt's container once its end is reported. */
  async remove(attemptId: string): Promise<void> {
    const container = await this.#find(attemptId);
    await container?.remove({ force: true, v: true }).catch((err: unknown) => {
      if (statusOf(err) !== 404) throw err;
    });
  }

  /** Removes this worker's containers of attempts other than `keep`: what no run of it still owns. */
  async sweep(keep: Set<string>): Promise<string[]> {
    const found = await this.opts.docker.listContainers({
      all: true,
      filters: { label: [`${Labels.worker}=${this.opts.workerName}`] },
    });
    const removed: string[] = [];
    for (const c of found) {
      const attemptId = c.Labels[Labels.attempt];
      if (attemptId && keep.has(attemptId)) continue;
      await this.opts.docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .then(() => removed.push(attemptId ?? c.Id))
        .catch((err: unknown) => {
          if (statusOf(err) !== 404) throw err;
        });
    }
    return removed;
  }
}
