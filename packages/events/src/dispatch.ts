/**
 * Messages on the dispatch stream, versioned wire contracts between the scheduler and the
 * workers. They are derived from committed events, never the truth: the scheduler turns
 * `JobAssigned` into a `RunAttempt` for the worker's slot, and `JobCancelRequested` into a
 * `StopAttempt` on the worker's control subject. Each names what the worker needs, field by
 * field, and nothing of the decider's state; a worker decides nothing on them: what it reports
 * is decided on the log by the control plane.
 *
 * `v` is the contract's version. A message without one was sent before versions were: it reads
 * as version 1, which it is. A change a worker of the previous version could not read takes a
 * new version: `Version` then lists both, so that workers read both while they are upgraded, and a
worker sent a version it does not read fails that attempt, saying to upgrade it.
 */
import { z } from 'zod';
import { BlobRefSchema } from './common.ts';
import { CodeArchiveSchema, OutputFileSchema } from './job.ts';
import { HealthCheckSchema, MAX_SERVICE_PORTS, PortSchema } from './service.ts';

/**
 * The newest version, which workers read along with every older one listed in `Version`.
 * Version 2 adds `probe`: a worker of version 1 would run the whole job where it was asked to
 * probe it, so a probe is sent as version 2 and every other message as version 1, which
 * workers of either version read. Version 3 adds sessions' runs (`session`, `sessionStop`),
 * which only workers that read version 3 are given. Version 4 adds a session run's `image`: a
 * worker of version 3 would run it on its host, so a session in a container is sent as version 4.
 * Version 5 adds a gang member's `rank`: a worker of version 4 would archive every member's log
 * over rank 0's, so a gang's members are sent as version 5, to workers that read it. Version 6
 * adds a service's `service` (its ports and health check): a worker of version 5 would not
 * watch its health, so a service's attempts are sent as version 6.
 */
export const DISPATCH_VERSION = 6;
/** The version a gang job's members are sent as. */
export const GANG_DISPATCH_VERSION = 5;
/** The version a service's attempts are sent as. */
export const SERVICE_DISPATCH_VERSION = 6;
/** A message without a version was sent before versions were, as version 1. */
const Version = z
  .union([z.literal(1), z.literal(2), z.literal(3), z.literal(4), z.literal(5), z.literal(6)])
  .default(1);

/** How a probe stops: after `maxSteps` optimizer steps, or once the peak has not grown for `plateauSteps`. */
export const ProbeLimitsSchema = z.object({
  maxSteps: z.number().int().min(1).max(1000),
  plateauSteps: z.number().int().min(1).max(1000),
  /** The probe fails as the job's own fault when it has seen no step for this long. */
  timeoutMs: z.number().int().min(1),
});
export type ProbeLimits = z.infer<typeof ProbeLimitsSchema>;

export const RunAttemptSchema = z.object({
  v: Version,
  kind: z.literal('run'),
  jobId: z.string(),
  attemptId: z.string(),
  attempt: z.number().int().min(1),
  /** The worker's GPUs it runs on, by index. */
  gpus: z.array(z.number().int()),
  command: z.string(),
  /** Run before the command, in the sandbox, as the attempt's user. */
  setup: z.string().optional(),
  env: z.record(z.string(), z.string()),
  /** What the builder made of the code, or null: then the code itself, or nothing. */
  artifact: BlobRefSchema.nullable(),
  code: CodeArchiveSchema.nullable(),
  /**
   * The job's image, by digest, for a worker of the Docker runtime; absent for a job that runs
   * on the host. A job with an image is only ever placed on a worker of that runtime.
   */
  image: z.string().min(1).max(512).optional(),
  /**
   * What the attempt was given: the VRAM booked on each of its GPUs and its CPU cores (as
   * `JobAssigned` records them), and the memory the job asked for, which a runtime that can
   * hold an attempt to a limit sets. Absent in a message sent before it was in the contract.
   */
  resources: z
    .object({
      vramBytes: z.number().int().min(0),
      cpus: z.number().int().min(0),
      memoryGb: z.number().positive().optional(),
    })
    .optional(),
  /**
   * The outputs of the attempt before this one (its checkpoints), which the worker restores into
   * this attempt's output directory before it starts it, with `TRAINYARD_RESUMED=1`.
   */
  restore: z.object({ attemptId: z.string(), files: z.array(OutputFileSchema) }).optional(),
  /**
   * The attempt is the job's probe (version 2): the worker runs the command under Trainyard's
   * probe, which measures its memory and step time and stops it within `limits`.
   */
  probe: ProbeLimitsSchema.optional(),
  /**
   * The job's time limit, in seconds: the control plane stops the attempt when it is reached;
   * should that stop not come (the control plane is away), the worker stops it itself a margin
   * later. Absent for a probe, and in a message sent before it was in the contract.
   */
  timeLimitS: z.number().int().min(1).optional(),
  /**
   * A gang job's member of this rank (1 and on; rank 0's message has none): its log is archived
   * apart from rank 0's, which is the job's.
   */
  rank: z.number().int().min(1).optional(),
  /**
   * The attempt is a service's (version 6): the ports it was given (also in its environment),
   * and the health check its worker runs, which stops it once it fails.
   */
  service: z
    .object({
      ports: z.array(PortSchema).min(1).max(MAX_SERVICE_PORTS),
      health: HealthCheckSchema.optional(),
    })
    .optional(),
  /** The job's head in the log when the message was derived: its `JobAssigned`. */
  headSeq: z.number().int().min(1).optional(),
});
export type RunAttempt = z.infer<typeof RunAttemptSchema>;

export const StopAttemptSchema = z.object({
  v: Version,
  kind: z.literal('stop'),
  jobId: z.string(),
  attemptId: z.string(),
});
export type StopAttempt = z.infer<typeof StopAttemptSchema>;

/**
 * Start a session's run (version 3): a working directory its SSH channels attach to, with the
 * session's code unpacked in it when it has some, or a container of `image` (by digest).
 */
export const StartRunSchema = z.object({
  v: z.union([z.literal(3), z.literal(4)]),
  kind: z.literal('session'),
  sessionId: z.string(),
  runId: z.string(),
  run: z.number().int().min(1),
  gpus: z.array(z.number().int()),
  resources: z.object({
    vramBytes: z.number().int().min(0),
    cpus: z.number().int().min(0),
    memoryGb: z.number().positive().optional(),
  }),
  code: CodeArchiveSchema.optional(),
  image: z.string().min(1).max(512).optional(),
  headSeq: z.number().int().min(1),
});
export type StartRun = z.infer<typeof StartRunSchema>;

/** End a session's run (version 3): its channels are closed and what it left is removed. */
export const StopRunSchema = z.object({
  v: z.literal(3),
  kind: z.literal('sessionStop'),
  sessionId: z.string(),
  runId: z.string(),
});
export type StopRun = z.infer<typeof StopRunSchema>;

export const DispatchMessageSchema = z.discriminatedUnion('kind', [
  RunAttemptSchema,
  StopAttemptSchema,
  StartRunSchema,
  StopRunSchema,
]);
export type DispatchMessage = z.infer<typeof DispatchMessageSchema>;
