import type { ProcessExit } from '@trainyard/domain';
import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import type { ProbeSpec } from './probe.ts';
import type { SessionContainer, SessionRunSpec } from './session-container.ts';

/** What a runtime needs to start one attempt. */
export interface RunSpec {
  jobId: string;
  attemptId: string;
  attempt: number;
  command: string;
  env: Record<string, string>;
  /** The attempt's sandbox: the unpacked code, and the working directory. */
  workDir: string;
  outputDir: string;
  /**
   * Where the job may append training metrics as JSON lines (`$TRAINYARD_METRICS_FILE`), in a
   * directory of its own that it may write.
   */
  metricsFile?: string;
  /**
   * Where the process's output goes and where its end is recorded, both written by the runtime
   * (never by the job), so that a worker that restarts can read them while the process runs on.
   */
  logFile: string;
  exitFile: string;
  /** Where the runtime records the process group it started, as it starts it. */
  pidFile: string;
  /**
   * Where the runtime records when a stop's grace ends (in a directory of the worker's, where
   * the job runs as a uid of its own), so that a worker that restarts within the grace keeps it:
   * it neither cuts it short nor lets it run on.
   */
  stopFile?: string;
  /** Where a runtime that launches through a script writes it (readable by the job alone). */
  scriptFile: string;
  /** What the runtime needs to launch the script (readable by the worker alone). */
  launchFile: string;
  /**
   * Where the script records how its command (or `setup`) ended. The job can write it, so it is
   * read only for what the job decides anyway: its own exit code.
   */
  resultFile: string;
  gpus: number[];
  /** The same GPUs by UUID, for a runtime that hands devices over by UUID. */
  gpuUuids?: string[];
  /** The job's image, by digest: a runtime of containers runs the attempt in it. */
  image?: string;
  /** The memory the attempt may use, for a runtime that holds it to a limit. */
  memoryBytes?: number;
  /** The CPU cores the attempt may use, for a runtime that holds it to a limit. */
  cpus?: number;
  /** The outputs of the attempt before were restored into `outputDir`: it resumes from them. */
  resumed?: boolean;
  /** The attempt is the job's probe: its command runs under the wrapper in `probe.dir`. */
  probe?: ProbeSpec;
  /** A shell command run in the work directory before `command`, as the same user. */
  setup?: string;
  /** The account the attempt runs as; absent: the worker's own. */
  user?: { uid: number; gid: number };
}

export type LogStreamName = 'stdout' | 'stderr';

/** One attempt's process, as a runtime runs it. */
export interface RunningAttempt {
  readonly pid: number | undefined;
  /** Settles once, when the process has ended and its output is drained. */
  readonly exited: Promise<ProcessExit>;
  /** Stops the attempt: SIGTERM to its whole process group, SIGKILL after the grace period. */
  kill(graceMs?: number): Promise<void>;
}

/** Runs attempts. One implementation per file: process (local sandbox), Docker. */
export interface Runtime {
  readonly kind: string;
  /** Whether it holds an attempt's `memoryBytes` as a hard limit. */
  readonly limitsMemory?: boolean;
  /** How much of the log an attempt's process writes is kept; absent: all of it. */
  readonly logLimitBytes?: number;
  /** Starts an attempt; one that cannot start settles `exited` with a launch error. */
  start(
    spec: RunSpec,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt>;
  /**
   * Takes over an attempt an earlier run of this worker started (process group `pid`), reading
   * its output from byte `offset` on; null when it is neither running nor recorded its exit.
   */
  attach?(
    spec: RunSpec,
    pid: number,
    offset: number,
    onOutput: (stream: LogStreamName, chunk: Buffer) => void,
  ): Promise<RunningAttempt | null>;
  /**
   * Ends every process still running as an attempt's unprivileged user, once the attempt is
   * over: what left its process group goes too.
   */
  endUser?(uid: number): Promise<void>;
  /**
   * Opens an SSH channel beside a running attempt (`trainyard ssh JOB_ID`): as its user, in its
   * work directory, with the environment it runs with. Rejects with a `ChannelRefused`.
   */
  channel?(spec: RunSpec, request: ChannelRequest): Promise<Channel>;
  /**
   * Starts a session's run in a container of its image (a runtime of containers); rejects when
   * it cannot start.
   */
  startSession?(spec: SessionRunSpec): Promise<SessionContainer>;
  /** Lets go of what the runtime holds to start attempts; what runs, runs on. */
  close?(): void;
  /** Forgets an ended attempt once its end is reported (a container is removed then). */
  remove?(attemptId: string): Promise<void>;
  /**
   * Removes what an earlier run of this worker left of attempts other than `keep`, which no
   * run of it owns any more; says which.
   */
  sweep?(keep: Set<string>): Promise<string[]>;
}
