/**
 * The queue as the scheduler sees it: a request-reply contract between the API and the leading
 * scheduler (`Subjects.queue`), answered from its folded state, never stored. Where a job or a
 * session stands in the queue, and why it waits.
 */
import { z } from 'zod';
import { ResourcesSchema } from './job.ts';

/**
 * Why something waits, like Slurm's `Reason`:
 * - `placing`: it fits now and goes in the scheduler's next round;
 * - `resources`: first in line for what it needs, it waits for room to free up;
 * - `priority`: work ahead of it in the queue waits for the same room;
 * - `unsatisfiable`: no worker the cluster has could hold it, even empty;
 * - `noWorkers`: the cluster has no online worker;
 * - `retryBackoff`: a retry after a platform failure, due at `retryAt`;
 * - `dependency`: jobs it depends on have not all succeeded;
 * - `building`: its image or artifact is being built, before it is queued;
 * - `overQuota`: it would take its owner's work (or its team's) past the GPUs their quota allows
 *   at once, or their work took its GPU-hours this month;
 * - `held`: its owner or an admin holds it; it is placed only once released;
 * - `reserved`: it would fit now, but only on the place kept for the first entry that waits for
 *   room, and it could still run when that entry is due to start there.
 */
export const PendingReason = z.enum([
  'placing',
  'resources',
  'priority',
  'unsatisfiable',
  'noWorkers',
  'retryBackoff',
  'dependency',
  'building',
  'overQuota',
  'held',
  'reserved',
  'gangIncomplete',
]);
export type PendingReason = z.infer<typeof PendingReason>;

export const QueueEntrySchema = z.object({
  kind: z.enum(['job', 'session']),
  id: z.string(),
  owner: z.string(),
  /** The team it is charged to. Absent from older schedulers. */
  team: z.string().nullable().optional(),
  status: z.string(),
  /** Its place in the placement order among what may be placed now, from 1; null otherwise. */
  position: z.number().int().min(1).nullable(),
  /** Its own priority, and the one it is placed by (aged by its wait). */
  priority: z.number().int(),
  effectivePriority: z.number().int(),
  resources: ResourcesSchema,
  reason: PendingReason,
  /** The reason in words, with what it needs or waits for. */
  message: z.string(),
  /** When it became placeable, or was submitted. */
  since: z.string(),
  retryAt: z.string().nullable(),
  /**
   * When it is expected to start, for the entry a place is reserved for: when running work on
   * that place reaches its time limits. Absent from older schedulers.
   */
  expectedStart: z.string().nullable().optional(),
});
export type QueueEntry = z.infer<typeof QueueEntrySchema>;

/** What each user holds now: GPUs and CPU slots of running work, and how many jobs and sessions. */
export const HolderSchema = z.object({
  owner: z.string(),
  gpus: z.number().int(),
  cpus: z.number().int(),
  jobs: z.number().int(),
  sessions: z.number().int(),
  /** The most GPUs their work may hold at once; null: no quota. Absent from older schedulers. */
  maxGpus: z.number().int().nullable().optional(),
  /** The GPU-hours their work took this calendar month (UTC), and may take. */
  gpuHours: z.number().optional(),
  maxGpuHours: z.number().nullable().optional(),
});
export type Holder = z.infer<typeof HolderSchema>;

/** What the work charged to a team holds now, against the team's quota. */
export const TeamHoldingSchema = z.object({
  team: z.string(),
  gpus: z.number().int(),
  maxGpus: z.number().int().nullable(),
  gpuHours: z.number(),
  maxGpuHours: z.number().nullable(),
});
export type TeamHolding = z.infer<typeof TeamHoldingSchema>;

export const QueueRequestSchema = z.discriminatedUnion('op', [
  /** The queue in placement order: `owner`'s (or `team`'s) entries only, when it names one. */
  z.object({
    op: z.literal('list'),
    owner: z.string().optional(),
    team: z.string().optional(),
    limit: z.number().int().min(1).max(10_000),
  }),
  /** Where one job or session stands. */
  z.object({ op: z.literal('explain'), id: z.string() }),
]);
export type QueueRequest = z.infer<typeof QueueRequestSchema>;

export const QueueReplySchema = z.object({
  /** The log sequence the scheduler's state held when it answered. */
  seq: z.number().int(),
  at: z.string(),
  /** How many wait in all (every owner's), and how many of them may be placed now. */
  total: z.number().int(),
  /** Absent from a scheduler from before it was. */
  positioned: z.number().int().optional(),
  entries: z.array(QueueEntrySchema),
  /** Who holds what: everyone, with a `list` for everyone; the owner alone, with theirs. */
  holders: z.array(HolderSchema).optional(),
  /** What teams hold: every team with a quota or holding some, or the one listed. */
  teams: z.array(TeamHoldingSchema).optional(),
});
export type QueueReply = z.infer<typeof QueueReplySchema>;
