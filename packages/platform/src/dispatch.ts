/**
 * Messages on the dispatch stream. They are derived from committed events, never the truth:
 * the scheduler turns `JobAssigned` into a `RunAttempt` for the worker's slot, and
 * `JobCancelRequested` into a `StopAttempt` on the worker's control subject.
 */
import { z } from 'zod';
import type { JobState } from '@trainyard/domain';
import { BlobRefSchema, CodeArchiveSchema } from '@trainyard/events';

const JobStateSchema = z.custom<JobState>(
  (v) =>
    typeof v === 'object' &&
    v !== null &&
    typeof (v as JobState).id === 'string' &&
    Array.isArray((v as JobState).attempts),
  'a job state',
);

export const RunAttemptSchema = z.object({
  kind: z.literal('run'),
  jobId: z.string(),
  attemptId: z.string(),
  attempt: z.number().int().min(1),
  gpus: z.array(z.number().int()),
  command: z.string(),
  /** Run before the command, in the sandbox, as the attempt's user. */
  setup: z.string().optional(),
  env: z.record(z.string(), z.string()),
  artifact: BlobRefSchema.nullable(),
  code: CodeArchiveSchema.nullable(),
  /**
   * The job as the log had it right after `JobAssigned`, and the head it was folded to. The
   * worker decides on this snapshot; the head guard on its first append proves it current, and
   * a conflict sends it back to the log.
   */
  job: JobStateSchema,
  head: z.object({ seq: z.number().int(), hash: z.string() }),
});
export type RunAttempt = z.infer<typeof RunAttemptSchema>;

export const StopAttemptSchema = z.object({
  kind: z.literal('stop'),
  jobId: z.string(),
  attemptId: z.string(),
});
export type StopAttempt = z.infer<typeof StopAttemptSchema>;

export const DispatchMessageSchema = z.discriminatedUnion('kind', [
  RunAttemptSchema,
  StopAttemptSchema,
]);
export type DispatchMessage = z.infer<typeof DispatchMessageSchema>;
