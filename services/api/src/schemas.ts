import { z } from 'zod';
import {
  ActorSchema,
  AttemptStatus,
  EstimateSchema,
  FailureSchema,
  GpuHoursQuota,
  GpuSchema,
  HoldBy,
  MAX_QUOTA_GPUS,
  JobStatus,
  PendingReason,
  ResourcesSchema,
} from '@trainyard/events';
import { STATUS_BY_CODE, type ApiErrorCode } from './errors.ts';
import { AttemptPortsSchema, ServiceViewFields } from './service-schemas.ts';

/**
 * The shapes the API answers with. Routes declare them, the serializer holds answers to them,
 * and the OpenAPI document at `/docs/json` is generated from them.
 */

export const isoTime = z.string().meta({ format: 'date-time', description: 'ISO 8601 time' });

export const ErrorBodySchema = z.object({
  error: z.object({
    code: z.enum(Object.keys(STATUS_BY_CODE) as [ApiErrorCode, ...ApiErrorCode[]]),
    message: z.string(),
    details: z.unknown().optional(),
  }),
});

export const AttemptViewSchema = z
  .object({
    number: z.number().int(),
    id: z.string(),
    workerId: z.string(),
    gpus: z.array(z.number().int()),
    members: z
      .array(z.object({ workerId: z.string(), gpus: z.array(z.number().int()) }))
      .optional()
      .describe('a gang job’s: its members of rank 1 and on (rank 0 is workerId and gpus)'),
    ports: AttemptPortsSchema,
    probe: z.boolean().describe('the attempt was the job’s probe, which measured its first steps'),
    status: z.enum(Object.values(AttemptStatus)),
    exitCode: z.number().int().nullable(),
    failure: FailureSchema.nullable(),
    assignedAt: isoTime,
    startedAt: isoTime.nullable(),
    finishedAt: isoTime.nullable(),
    gpuHours: z.number().describe('GPUs held x time held, from assignment to the end (or now)'),
  })
  .meta({ id: 'Attempt' });

/** Where one waiting job or session stands in the queue, on a GET of it, from the scheduler. */
export const PendingFields = {
  queuePosition: z
    .number()
    .int()
    .nullable()
    .optional()
    .describe(
      'only on a GET of one: its place in the placement order, from 1, while it may be placed; null otherwise or when no scheduler answers',
    ),
  pendingReason: PendingReason.nullable()
    .optional()
    .describe(
      'only on a GET of one, while it waits: why (placing, resources, priority, unsatisfiable, overQuota, held, reserved, noWorkers, retryBackoff, dependency, building); GET /v1/queue lists them all',
    ),
  pendingMessage: z
    .string()
    .nullable()
    .optional()
    .describe('only on a GET of one: the pending reason in words'),
  expectedStart: z
    .string()
    .nullable()
    .optional()
    .describe(
      'only on a GET of one: when it is expected to start, where room is reserved for it (the time by which running work there reaches its time limits); null otherwise',
    ),
};

export const JobViewSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    owner: z.string(),
    team: z.string().nullable().describe('the team its GPUs are charged to'),
    status: z.enum(Object.values(JobStatus)),
    priority: z.number().int(),
    command: z.string(),
    image: z
      .string()
      .nullable()
      .describe('the base image the job runs on, if it runs in a container'),
    imageDigest: z
      .string()
      .nullable()
      .describe('the digest of the image built for the job (sha256:…), once built'),
    resources: ResourcesSchema,
    estimate: EstimateSchema.nullable().describe(
      'what the job’s probe measured (a job with GPUs and no vramGb is probed before it is placed)',
    ),
    maxRetries: z.number().int(),
    timeLimit: z
      .number()
      .int()
      .nullable()
      .describe('seconds an attempt may run before it is stopped and the job fails as timeLimit'),
    preemptible: z
      .boolean()
      .describe(
        'a waiting job of a higher priority may stop its running attempt; it is queued again without spending a retry',
      ),
    shards: z
      .number()
      .int()
      .nullable()
      .describe('an array job: how many shards it runs, each a job of its own (<id>_<index>)'),
    nodes: z.number().int().nullable().describe('a gang job: how many workers it spans at once'),
    ...ServiceViewFields,
    shardOf: z
      .object({ jobId: z.string(), index: z.number().int() })
      .nullable()
      .describe('a shard: its array job and its index in it'),
    shardStatuses: z
      .record(z.string(), z.number().int())
      .optional()
      .describe(
        'only on GET /v1/jobs/{id} of an array job: how many of its shards stand in each status',
      ),
    dependsOn: z.array(z.string()).describe('jobs that must succeed before this one is placed'),
    dependenciesMet: z
      .boolean()
      .describe('every job in dependsOn has succeeded (true without any): until then it waits'),
    held: z
      .object({ by: HoldBy, reason: z.string() })
      .nullable()
      .describe('who holds it (its owner or an admin) and why; a held job is not placed'),
    envNames: z.array(z.string()),
    createdAt: isoTime,
    startedAt: isoTime.nullable(),
    finishedAt: isoTime.nullable(),
    exitCode: z.number().int().nullable(),
    failure: FailureSchema.nullable(),
    retryAt: isoTime.nullable(),
    attemptCount: z.number().int(),
    seq: z.number().int().describe('the stream sequence of the last event the view holds'),
    attempts: z.array(AttemptViewSchema).optional().describe('only on GET /v1/jobs/{id}'),
    ...PendingFields,
    gpuHours: z
      .number()
      .optional()
      .describe('the GPU-hours its attempts held; only on GET /v1/jobs/{id}'),
  })
  .meta({ id: 'Job' });

export const WorkerViewSchema = z
  .object({
    id: z.string(),
    hostname: z.string().nullable().describe('admins only; null for everyone else'),
    status: z.string(),
    simulated: z.boolean().describe('its GPUs are simulated (tests and benchmarks)'),
    gpus: z.array(
      GpuSchema.extend({
        usedBytes: z
          .number()
          .int()
          .nullable()
          .describe('memory in use at the last heartbeat; null before one said'),
        utilPct: z.number().nullable().describe('utilisation at the last heartbeat, in percent'),
      }),
    ),
    cpuSlots: z.number().int(),
    runtime: z.string(),
    version: z.string(),
    registeredAt: isoTime,
    lastHeartbeatAt: isoTime.nullable(),
  })
  .meta({ id: 'Worker' });

/** Control, format and bidirectional-override characters: they can hide or reorder text. */
export const HIDDEN_CHARACTERS = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

export const EventViewSchema = z
  .object({
    id: z.string(),
    type: z.string(),
    seq: z.number().int(),
    occurredAt: isoTime,
    actor: ActorSchema,
    correlationId: z.string().optional(),
    prevHash: z.string(),
    hash: z.string(),
    data: z.unknown(),
  })
  .meta({ id: 'Event' });

export const OutputViewSchema = z.object({
  path: z.string(),
  size: z.number().int(),
  sha256: z.string(),
});

export const LoginSchema = z.object({ username: z.string().min(1), password: z.string().min(1) });
export const TokenSchema = z.object({
  token: z.string().describe('the access token: Authorization: Bearer TOKEN'),
  refreshToken: z.string().describe('trade it at POST /v1/auth/refresh for the next token'),
  username: z.string(),
  role: z.enum(['admin', 'user']),
  expiresAt: isoTime,
});

export const UserViewSchema = z.object({
  username: z.string(),
  role: z.enum(['admin', 'user']),
  createdAt: isoTime,
  disabled: z.boolean(),
  maxGpus: z
    .number()
    .int()
    .nullable()
    .describe('the most GPUs their jobs and sessions may hold at once; null: no quota'),
  maxGpuHours: z
    .number()
    .nullable()
    .describe('the GPU-hours their work may take a calendar month (UTC); null: no quota'),
});

/** A quota to set, of GPUs at once, of GPU-hours a month, or both; null lifts one. */
export const QuotaBodySchema = z
  .object({
    maxGpus: z
      .number()
      .int()
      .min(0)
      .max(MAX_QUOTA_GPUS)
      .nullable()
      .optional()
      .describe('the most GPUs the work may hold at once; null: no limit'),
    maxGpuHours: GpuHoursQuota.optional().describe(
      'the GPU-hours the work may take each calendar month (UTC), ended and running work counted; null: no limit',
    ),
  })
  .strict()
  .refine((q) => q.maxGpus !== undefined || q.maxGpuHours !== undefined, {
    message: 'give maxGpus, maxGpuHours or both',
  });
export type QuotaBody = z.infer<typeof QuotaBodySchema>;

/** The quotas just set, as a quota route answers. */
export const QuotaSetShape = {
  maxGpus: z.number().int().nullable().optional(),
  maxGpuHours: z.number().nullable().optional(),
};

export const LimitsSchema = z.object({
  maxUploadBytes: z.number().int().describe('the largest code archive accepted'),
  maxListLimit: z.number().int().describe('the most jobs one GET /v1/jobs page holds'),
});

export const HealthSchema = z.object({
  status: z.enum(['ok', 'degraded', 'down']),
  nats: z.boolean(),
  postgres: z.boolean(),
});

export const IdParamsSchema = z.object({ id: z.string().describe('a job id') });
export const AfterQuerySchema = z.object({
  after: z.coerce
    .number()
    .int()
    .min(0)
    .optional()
    .describe('wait until the read model holds this stream sequence (read your own write)'),
});

/**
 * Error answers a route can give, by status, each with the codes that status carries; every
 * route can also fail with 500.
 */
export function errorResponses(...statuses: number[]) {
  const out: Record<number, z.ZodType> = {};
  for (const status of [...statuses, 500]) {
    const codes = Object.entries(STATUS_BY_CODE)
      .filter(([, s]) => s === status)
      .map(([c]) => c);
    out[status] = ErrorBodySchema.describe(`codes: ${codes.join(', ')}`);
  }
  return out;
}

/** A yes/no query parameter: `true`/`1` or `false`/`0`, absent meaning no. */
export const queryFlag = (description: string) =>
  z
    .enum(['true', 'false', '1', '0'])
    .optional()
    .transform((v) => v === 'true' || v === '1')
    .describe(description);
