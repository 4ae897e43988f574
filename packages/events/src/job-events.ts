/**
 * Job events that steer a job from outside its attempts (cancelling, priorities, time limits,
 * preemption, dependencies, holds, logins), and the union of every job event.
 */
import { z } from 'zod';
import { FailureSchema, SshLoginSchema } from './common.ts';
import {
  HoldBy,
  PrioritySchema,
  JobSubmitted,
  JobBuildStarted,
  JobBuilt,
  JobBuildFailed,
  JobAssigned,
  JobStarted,
  JobMemberStarted,
  JobMemberEnded,
  JobEstimated,
  JobOutputsSynced,
  JobSucceeded,
  JobAttemptFailed,
} from './job.ts';

export const JobCancelRequested = z.object({
  type: z.literal('JobCancelRequested'),
  data: z.object({ attemptId: z.string().min(1), workerId: z.string().min(1) }),
});

export const JobCancelled = z.object({
  type: z.literal('JobCancelled'),
  data: z.object({ attemptId: z.string().min(1).optional() }),
});

/** The job's priority changed (its owner lowered it, or an admin set it): placed by it from now. */
export const JobPriorityChanged = z.object({
  type: z.literal('JobPriorityChanged'),
  data: z.object({
    priority: PrioritySchema,
    previous: PrioritySchema,
  }),
});

/**
 * The running attempt reached the job's time limit: its worker is told to stop it, and however it
 * ends, the job fails as `timeLimit`, without a retry.
 */
export const JobTimeLimitReached = z.object({
  type: z.literal('JobTimeLimitReached'),
  data: z.object({
    attemptId: z.string().min(1),
    workerId: z.string().min(1),
    timeLimit: z.number().int().min(1),
  }),
});

/**
 * The running attempt is stopped to make room for `by`, a waiting job or session of a higher
 * priority: however it ends (but for a success of its own), the job is queued again without
 * spending a retry.
 */
export const JobPreempted = z.object({
  type: z.literal('JobPreempted'),
  data: z.object({
    attemptId: z.string().min(1),
    workerId: z.string().min(1),
    by: z.string().min(1),
  }),
});

/** Every job this one depends on succeeded: it may be placed. */
export const JobDependenciesMet = z.object({
  type: z.literal('JobDependenciesMet'),
  data: z.object({}),
});

/** A job this one depends on failed or was cancelled: this one fails without running. */
export const JobDependencyFailed = z.object({
  type: z.literal('JobDependencyFailed'),
  data: z.object({
    dependency: z.string().min(1),
    /** How the dependency ended: `none` for a job the log does not hold. */
    status: z.enum(['failed', 'cancelled', 'none']),
    failure: FailureSchema,
  }),
});

/**
 * The job is held: while it waits, it is not placed until released (like Slurm's `hold`). It
 * may still be built and measured; a running attempt is not touched.
 */
export const JobHeld = z.object({
  type: z.literal('JobHeld'),
  data: z.object({ by: HoldBy, reason: z.string().max(512).default('') }),
});

/** The hold is lifted: the job queues again, behind what queued while it was held. */
export const JobReleased = z.object({
  type: z.literal('JobReleased'),
  data: z.object({}),
});

/** The array job's shards are submitted, each a job of its own: it runs until they all end. */
export const JobSharded = z.object({
  type: z.literal('JobSharded'),
  data: z.object({ count: z.number().int().min(1) }),
});

/**
 * Every shard of the array job ended: it succeeded when they all did, failed when one failed,
 * and is cancelled when one was cancelled and none failed.
 */
export const JobShardsEnded = z.object({
  type: z.literal('JobShardsEnded'),
  data: z.object({
    status: z.enum(['succeeded', 'failed', 'cancelled']),
    succeeded: z.number().int().min(0),
    failed: z.number().int().min(0),
    cancelled: z.number().int().min(0),
    failure: FailureSchema.optional(),
  }),
});

/** A login through the SSH gateway to a shell beside the job's running attempt. */
export const JobLogin = z.object({
  type: z.literal('JobLogin'),
  data: SshLoginSchema,
});

export const JobEventSchema = z.discriminatedUnion('type', [
  JobSubmitted,
  JobBuildStarted,
  JobBuilt,
  JobBuildFailed,
  JobAssigned,
  JobStarted,
  JobMemberStarted,
  JobMemberEnded,
  JobEstimated,
  JobOutputsSynced,
  JobSucceeded,
  JobAttemptFailed,
  JobCancelRequested,
  JobCancelled,
  JobLogin,
  JobPriorityChanged,
  JobTimeLimitReached,
  JobPreempted,
  JobDependenciesMet,
  JobDependencyFailed,
  JobHeld,
  JobReleased,
  JobSharded,
  JobShardsEnded,
]);
export type JobEvent = z.infer<typeof JobEventSchema>;
export type JobEventType = JobEvent['type'];
