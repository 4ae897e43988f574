/**
 * Job events.
 *
 * Glossary
 * - job: one training run a user asked for: code, a command and the resources it needs.
 * - attempt: one try at running a job on one worker; a job has attempts numbered from 1.
 * - worker: a daemon on a host that runs attempts; it offers GPU slots and CPU slots.
 * - slot: one GPU (by index) or the CPU pool of a worker; an attempt is dispatched to a slot.
 * - lease: the scheduler's right to place jobs, held in a KV key with a TTL.
 * - artifact: what the builder made of the job's code (for the process runtime, a tarball).
 */
import { z } from 'zod';
import { BlobRefSchema, FailureSchema } from './common.ts';
import {
  HealthCheckSchema,
  JobKindSchema,
  MAX_SERVICE_PORTS,
  PortSchema,
  ServicePortCountSchema,
} from './service.ts';
import { TEAM_NAME } from './team.ts';

/** A job's id, as Trainyard makes them; an SSH username of this shape names a job. */
export const JOB_ID_PATTERN = /^job_[A-Za-z0-9_-]{1,124}$/;

export const JOB_NAME_MAX = 128;

/** The most shards an array job may have. */
export const MAX_SHARDS = 1000;

/** The most workers a gang job may span. */
export const MAX_NODES = 64;

/** What a job needs to run. `gpus: 0` means CPU only. */
export const ResourcesSchema = z.object({
  gpus: z.number().int().min(0).max(64),
  vramGb: z.number().positive().max(4096).optional(),
  cpus: z.number().int().min(1).max(1024).optional(),
  memoryGb: z.number().positive().max(65536).optional(),
  /**
   * The GPU model a job needs, matched against each GPU's name without regard to case
   * (`A100` takes an `NVIDIA A100-SXM4-80GB`). Only for jobs that ask for GPUs.
   */
  gpuModel: z
    .string()
    .trim()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9 ._-]+$/, 'letters, digits, spaces, dots, dashes and underscores')
    .optional(),
});
export type Resources = z.infer<typeof ResourcesSchema>;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * An image reference as Docker's grammar has it: an optional registry host (with a port), a
 * lowercase path, an optional tag and an optional sha256 digest. Nothing else gets through: no
 * spaces, quotes, newlines or shell characters.
 */
const PATH_PART = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
export const IMAGE_REFERENCE = new RegExp(
  `^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?/)?` +
    `${PATH_PART}(?:/${PATH_PART})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$`,
);

/** A base image a job's or a session's image is built on, as a spec names it. */
export const BaseImageSchema = z
  .string()
  .max(255)
  .regex(
    IMAGE_REFERENCE,
    'an image reference such as python, pytorch/pytorch:2.3.0 or host:5000/team/image:tag',
  );

/** A job's priority: higher is placed first (aged by its wait); above 0 needs an admin. */
export const PrioritySchema = z.number().int().min(-1000).max(1000);

/** The longest time limit a job may declare: 30 days. */
export const MAX_TIME_LIMIT_SECONDS = 30 * 24 * 3600;

const DURATION = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;

/** Seconds in a duration written as `90s`, `45m`, `2h`, `1d` or `1h30m`; NaN for anything else. */
export function parseDuration(text: string): number {
  const m = DURATION.exec(text.trim());
  if (!m || text.trim() === '') return NaN;
  const [d, h, min, s] = m.slice(1).map((x) => Number(x ?? 0)) as [number, number, number, number];
  return ((d * 24 + h) * 60 + min) * 60 + s;
}

/** A duration in seconds as `parseDuration` reads it back: `1h30m`, `45s`, `2d`. */
export function formatDuration(seconds: number): string {
  const parts: [number, string][] = [
    [Math.floor(seconds / 86_400), 'd'],
    [Math.floor((seconds % 86_400) / 3600), 'h'],
    [Math.floor((seconds % 3600) / 60), 'm'],
    [seconds % 60, 's'],
  ];
  return (
    parts
      .filter(([n]) => n > 0)
      .map(([n, unit]) => `${n}${unit}`)
      .join('') || '0s'
  );
}

/**
 * How long an attempt of a job may run, in whole seconds, or as a duration (`90s`, `45m`, `2h`,
 * `1d`, `1h30m`); kept as seconds.
 */
export const TimeLimitSchema = z
  .union([z.number(), z.string().max(32)])
  .transform((value, ctx) => {
    if (typeof value === 'number') return value;
    const seconds = parseDuration(value);
    if (Number.isNaN(seconds)) {
      ctx.addIssue({ code: 'custom', message: 'a duration such as 90s, 45m, 2h or 1h30m' });
      return z.NEVER;
    }
    return seconds;
  })
  .pipe(z.number().int().min(1).max(MAX_TIME_LIMIT_SECONDS));

/** The user's description of a job, as accepted by the API. */
export const JobSpecSchema = z.object({
  name: z.string().trim().min(1).max(JOB_NAME_MAX),
  command: z.string().trim().min(1).max(8192),
  /**
   * The base image the job's image is built on (`python`: Trainyard's default base). A job with
   * an image runs in a container, on a worker of the Docker runtime.
   */
  image: BaseImageSchema.optional(),
  setup: z.string().min(1).max(8192).optional(),
  resources: ResourcesSchema,
  priority: PrioritySchema.default(0),
  /** The team of the user's to charge its GPUs to; by default, the first team they joined. */
  team: z.string().regex(TEAM_NAME, 'a team name').optional(),
  maxRetries: z.number().int().min(0).max(20).default(3),
  /**
   * Jobs that must succeed before this one is placed: if one fails or is cancelled, this one
   * fails as `dependencyFailed`.
   */
  dependsOn: z
    .array(z.string().regex(JOB_ID_PATTERN, 'a job id (job_…)'))
    .min(1)
    .max(64)
    .refine((ids) => new Set(ids).size === ids.length, 'names a job twice')
    .optional(),
  /** Seconds an attempt may run before it is stopped and the job fails as `timeLimit`. */
  timeLimit: TimeLimitSchema.optional(),
  /**
   * A waiting job of a higher priority may stop its running attempt to take its place; it is
   * queued again without spending a retry, and resumes from its synced outputs.
   */
  preemptible: z.boolean().optional(),
  /**
   * An array job: `shards` independent tasks of the same spec, each a job of its own (`<id>_<i>`)
   * with `TRAINYARD_SHARD_INDEX` and `TRAINYARD_SHARD_COUNT`, built once and placed, retried and
   * cancelled alone; the array job succeeds when every shard has.
   */
  shards: z.number().int().min(1).max(MAX_SHARDS).optional(),
  /**
   * A gang job: one process on each of `nodes` workers, all placed at once or none, each with
   * `resources` of its own and the variables torchrun reads (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`,
   * `MASTER_ADDR`, `MASTER_PORT`); the loss of one ends the attempt of all.
   */
  nodes: z.number().int().min(1).max(MAX_NODES).optional(),
  /** A `service` runs until stopped, on `ports` (1 by default) watched by `health`. */
  kind: JobKindSchema.optional(),
  ports: ServicePortCountSchema.optional(),
  health: HealthCheckSchema.optional(),
  env: z
    .record(z.string().regex(ENV_NAME, 'must be a shell variable name'), z.string().max(65536))
    .default({}),
});
export type JobSpec = z.infer<typeof JobSpecSchema>;
export type JobSpecInput = z.input<typeof JobSpecSchema>;

export const CodeArchiveSchema = BlobRefSchema.extend({ format: z.enum(['zip', 'tar.gz']) });
export type CodeArchive = z.infer<typeof CodeArchiveSchema>;

export const OutputFileSchema = z.object({
  path: z.string().min(1),
  sizeBytes: z.number().int().nonnegative(),
  sha256: z.string().length(64),
});
export type OutputFile = z.infer<typeof OutputFileSchema>;

/** Who put a hold on a job: a hold an admin put on it only an admin lifts. */
export const HoldBy = z.enum(['owner', 'admin']);
export type HoldBy = z.infer<typeof HoldBy>;

/** The image built for a job: a reference that names it by digest, and the digest. */
export const BuiltImageSchema = z.object({
  ref: z.string().min(1).max(512),
  digest: z.string().regex(/^sha256:[a-f0-9]{64}$/),
});
export type BuiltImage = z.infer<typeof BuiltImageSchema>;

/** A shard's place in its array job. */
export const ShardOfSchema = z.object({
  jobId: z.string().regex(JOB_ID_PATTERN),
  index: z.number().int().min(0),
  count: z.number().int().min(1).max(MAX_SHARDS),
});
export type ShardOf = z.infer<typeof ShardOfSchema>;

export const JobSubmitted = z.object({
  type: z.literal('JobSubmitted'),
  data: z.object({
    owner: z.string().min(1),
    spec: JobSpecSchema,
    code: CodeArchiveSchema.optional(),
    /**
     * Whether the job is built before it is queued, decided once at submission. Absent from
     * events recorded before it was: `buildsFirst` reads those.
     */
    build: z.boolean().optional(),
    /**
     * Whether a probe measures the job's memory before it is queued (it asks for GPUs and
     * declares no `vramGb`), decided once at submission. Absent from events recorded before it
     * was: such a job takes each of its GPUs whole.
     */
    estimate: z.boolean().optional(),
    /** Submitted held, by its owner or an admin: it is not placed until `JobReleased`. */
    hold: HoldBy.optional(),
    /** The team its GPUs are charged to, decided once at submission from its owner's teams. */
    team: z.string().regex(TEAM_NAME).optional(),
    /** The job is a shard of an array job: its place in it. */
    shardOf: ShardOfSchema.optional(),
    /** What the array job's build made, which its shards run without a build of their own. */
    built: z.object({ artifact: BlobRefSchema, image: BuiltImageSchema.optional() }).optional(),
  }),
});
export type JobSubmittedData = z.infer<typeof JobSubmitted>['data'];

export const JobBuildStarted = z.object({
  type: z.literal('JobBuildStarted'),
  data: z.object({ builderId: z.string().min(1) }),
});

export const JobBuilt = z.object({
  type: z.literal('JobBuilt'),
  data: z.object({
    artifact: BlobRefSchema,
    /** The job's image, when it has one (its spec names an `image`). */
    image: BuiltImageSchema.optional(),
    durationMs: z.number().nonnegative(),
  }),
});

export const JobBuildFailed = z.object({
  type: z.literal('JobBuildFailed'),
  data: z.object({ failure: FailureSchema }),
});

/** What one member of an attempt holds: the worker it runs on, and that worker's GPUs and CPUs. */
export const PlacementSchema = z.object({
  workerId: z.string().min(1),
  gpus: z.array(z.number().int().min(0)),
  vramBytes: z.number().int().nonnegative(),
  cpus: z.number().int().min(0),
});
export type Placement = z.infer<typeof PlacementSchema>;

export const JobAssigned = z.object({
  type: z.literal('JobAssigned'),
  data: PlacementSchema.extend({
    attemptId: z.string().min(1),
    attempt: z.number().int().min(1),
    /** The attempt is the job's probe: it measures the job's first steps, then stops it. */
    probe: z.boolean().optional(),
    /**
     * A gang job's other members, ranks 1 to `nodes - 1`, each on a worker of its own (rank 0 is
     * the placement above): all placed in this one event.
     */
    members: z
      .array(PlacementSchema)
      .min(1)
      .max(MAX_NODES - 1)
      .optional(),
    /** The port a gang's rank 0 listens on for the others (`MASTER_PORT`). */
    masterPort: PortSchema.optional(),
    /** A service's ports on its worker (`TRAINYARD_PORT`, `TRAINYARD_PORTS`). */
    ports: z.array(PortSchema).min(1).max(MAX_SERVICE_PORTS).optional(),
  }),
});

/** What a probe measured of a job's first training steps. */
export const EstimateSchema = z.object({
  /** Peak CUDA memory reserved on one GPU (`torch.cuda.max_memory_reserved()`); 0 on CPU. */
  vramBytes: z.number().int().nonnegative(),
  /** Peak resident memory of the training process. */
  ramBytes: z.number().int().nonnegative(),
  /** Mean time between optimizer steps, null when fewer than two were seen. */
  stepMs: z.number().nonnegative().nullable(),
  steps: z.number().int().min(1),
  device: z.enum(['cuda', 'cpu']),
});
export type Estimate = z.infer<typeof EstimateSchema>;

/** A probe measured the job: it is queued, to be placed by what it needs. */
export const JobEstimated = z.object({
  type: z.literal('JobEstimated'),
  data: z.object({
    attemptId: z.string().min(1),
    estimate: EstimateSchema,
    durationMs: z.number().nonnegative(),
  }),
});

export const JobStarted = z.object({
  type: z.literal('JobStarted'),
  data: z.object({ attemptId: z.string().min(1), pid: z.number().int().optional() }),
});

/**
 * One member of a gang job's attempt started (its worker confirmed it): the attempt is
 * `JobStarted` once every member has.
 */
export const JobMemberStarted = z.object({
  type: z.literal('JobMemberStarted'),
  data: z.object({ attemptId: z.string().min(1), rank: z.number().int().min(0) }),
});

/**
 * One member of a gang job's attempt ended while others still run: exited 0 (`failure` null), or
 * failed, which ends the attempt for all (the others are stopped). The attempt itself ends, and
 * gives back what it holds, once every member that started has ended: succeeded when all exited
 * 0, else failed as the first to fail did (one the platform failed, a member lost with its
 * worker, first).
 */
export const JobMemberEnded = z.object({
  type: z.literal('JobMemberEnded'),
  data: z.object({
    attemptId: z.string().min(1),
    rank: z.number().int().min(0),
    exitCode: z.number().int().nullable(),
    failure: FailureSchema.nullable(),
    durationMs: z.number().nonnegative(),
    /** Its worker stopped it itself past the job's time limit. */
    timeLimited: z.literal(true).optional(),
    /** Its worker stopped it when told to (its peers' failure, a cancel, the time limit). */
    stopped: z.literal(true).optional(),
  }),
});

export const JobOutputsSynced = z.object({
  type: z.literal('JobOutputsSynced'),
  data: z.object({ attemptId: z.string().min(1), files: z.array(OutputFileSchema) }),
});

export const JobSucceeded = z.object({
  type: z.literal('JobSucceeded'),
  data: z.object({ attemptId: z.string().min(1), durationMs: z.number().nonnegative() }),
});

/**
 * An attempt failed. One event says both what happened and what follows: a retry after a
 * backoff (`retry`), or the end of the job (`retry: null`), so the decision is atomic.
 */
export const JobAttemptFailed = z.object({
  type: z.literal('JobAttemptFailed'),
  data: z.object({
    attemptId: z.string().min(1),
    exitCode: z.number().int().nullable(),
    failure: FailureSchema,
    durationMs: z.number().nonnegative(),
    retry: z
      .object({ retryAt: z.iso.datetime(), backoffMs: z.number().int().nonnegative() })
      .nullable(),
  }),
});

/** The public statuses of a job, in lifecycle order. */
export const JobStatus = {
  submitted: 'submitted',
  building: 'building',
  estimating: 'estimating',
  queued: 'queued',
  assigned: 'assigned',
  running: 'running',
  retrying: 'retrying',
  succeeded: 'succeeded',
  failed: 'failed',
  cancelled: 'cancelled',
} as const;
export type JobStatus = (typeof JobStatus)[keyof typeof JobStatus];

/** Attempt statuses. */
export const AttemptStatus = {
  assigned: 'assigned',
  running: 'running',
  succeeded: 'succeeded',
  failed: 'failed',
  cancelled: 'cancelled',
} as const;
export type AttemptStatus = (typeof AttemptStatus)[keyof typeof AttemptStatus];
