import { z } from 'zod';
import { JobSpecSchema, JobStatus, ResourcesSchema } from '@trainyard/events';
import { HIDDEN_CHARACTERS } from './schemas.ts';

// What a submission takes (its spec, its form), and what the routes that change a job answer.

/** The most environment variables a job may set, and their size in all, names included. */
export const MAX_ENV_VARS = 256;
export const MAX_ENV_BYTES = 64 * 1024;
/** What the names of the variables of the shells that run a job begin with. */
export const RESERVED_ENV_PREFIX = '__ty_';

/**
 * A job spec as the API takes it: unknown fields are refused rather than dropped, and the fields
 * that nothing honours yet are refused with a message that says so.
 */
export const SubmitSpecSchema = JobSpecSchema.extend({
  name: JobSpecSchema.shape.name.refine((n) => !HIDDEN_CHARACTERS.test(n), {
    message: 'control and bidirectional characters are not allowed in a name',
  }),
  priority: JobSpecSchema.shape.priority.describe(
    'higher runs first; above 0 needs an admin, anyone may go lower (down to -1000)',
  ),
  env: JobSpecSchema.shape.env.describe(
    `at most ${MAX_ENV_VARS} variables and ${MAX_ENV_BYTES / 1024} KiB in all, names included; ` +
      `no name beginning with ${RESERVED_ENV_PREFIX}`,
  ),
  dependsOn: JobSpecSchema.shape.dependsOn.describe(
    'ids of jobs (yours; an admin may name anyone’s) that must succeed before this one is placed, at most 64; if one fails or is cancelled, this one fails as dependencyFailed without running',
  ),
  timeLimit: JobSpecSchema.shape.timeLimit.describe(
    'how long an attempt may run: whole seconds, or a duration such as 90s, 45m, 2h or 1h30m (at most 30d); past it the attempt is stopped (SIGTERM, then SIGKILL) and the job fails as timeLimit, without a retry',
  ),
  preemptible: JobSpecSchema.shape.preemptible.describe(
    'a waiting job of a higher priority may stop its running attempt (SIGTERM, then SIGKILL after the grace period) to take its place; it is queued again at once without spending a retry, and its next attempt starts from the outputs the stopped one synced, with TRAINYARD_RESUMED=1',
  ),
  shards: JobSpecSchema.shape.shards.describe(
    'an array job of this many shards (at most 1000): each runs the command as a job of its own, <id>_<index>, with TRAINYARD_SHARD_INDEX and TRAINYARD_SHARD_COUNT, and is placed, retried and cancelled alone; the array job is built once and succeeds when every shard has (it fails if one failed); cancelling it cancels its shards',
  ),
  nodes: JobSpecSchema.shape.nodes.describe(
    'a gang job over this many workers (at most 64), placed all at once or not at all, `resources` on each: every member runs the command with WORLD_SIZE, RANK (and NODE_RANK), LOCAL_RANK=0, MASTER_ADDR and MASTER_PORT, as torchrun --nnodes --node_rank reads them; when one member fails, the attempt of all ends; rank 0 keeps the outputs; not with shards or preemptible',
  ),
  image: JobSpecSchema.shape.image.describe(
    'the base image the job is built on and runs in (`python`: the default base); only where the cluster has a registry for images',
  ),
  resources: ResourcesSchema.extend({
    cpus: ResourcesSchema.shape.cpus.describe(
      'CPU slots a CPU-only job (gpus 0) takes on its worker; a share of the queue, not a CPU limit',
    ),
    memoryGb: ResourcesSchema.shape.memoryGb.describe(
      'the memory the job may use, a hard limit: the job goes only to a worker that holds it (in a container, or in a memory cgroup of its own on the host)',
    ),
  }).strict(),
})
  .strict()
  .superRefine((spec, ctx) => {
    const env = Object.entries(spec.env);
    if (env.length > MAX_ENV_VARS) {
      ctx.addIssue({
        code: 'custom',
        path: ['env'],
        message: `${env.length} variables, more than ${MAX_ENV_VARS}`,
      });
    }
    const envBytes = env.reduce(
      (sum, [k, v]) => sum + Buffer.byteLength(k) + Buffer.byteLength(v),
      0,
    );
    const reserved = env.find(([name]) => name.startsWith(RESERVED_ENV_PREFIX));
    if (reserved) {
      ctx.addIssue({
        code: 'custom',
        path: ['env', reserved[0]],
        message: `names beginning with ${RESERVED_ENV_PREFIX} are Trainyard's own`,
      });
    }
    if (envBytes > MAX_ENV_BYTES) {
      ctx.addIssue({
        code: 'custom',
        path: ['env'],
        message: `${envBytes} bytes in all, more than ${MAX_ENV_BYTES}`,
      });
    }
    if (spec.resources.gpuModel !== undefined && spec.resources.gpus === 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['resources', 'gpuModel'],
        message: 'a GPU model is for jobs that ask for GPUs: set gpus, or leave out gpuModel',
      });
    }
  })
  .meta({ id: 'JobSpec' });

/** The multipart form of a submission, for the document: the body is read part by part. */
export const SubmitFormSchema = z.unknown().meta({
  type: 'object',
  properties: {
    spec: { type: 'string', description: 'the JobSpec, as JSON' },
    code: { type: 'string', format: 'binary', description: 'a .tar.gz or .zip of the code' },
  },
  required: ['spec'],
});

export const SubmittedSchema = z.object({
  id: z.string(),
  status: z.enum(Object.values(JobStatus)),
  seq: z.number().int().describe('pass as ?after= to read your own write'),
});

export const CancelledSchema = SubmittedSchema.extend({ cancelRequested: z.boolean() });

export const PriorityChangedSchema = SubmittedSchema.extend({ priority: z.number().int() });
