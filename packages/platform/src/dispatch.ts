/**
 * Messages on the dispatch stream. They are derived from committed events, never the truth:
 * the scheduler turns `JobAssigned` into a `RunAttempt` for the worker's slot, and
 * `JobCancelRequested` into a `StopAttempt` on the worker's control subject. A worker decides
 * nothing on them: what it reports is decided on the log by the control plane.
 */
import { z } from 'zod';
import { BlobRefSchema, CodeArchiveSchema } from '@trainyard/events';

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
