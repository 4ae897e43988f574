/**
 * Messages on the dispatch stream. They are derived from committed events (never the truth):
 * the scheduler turns `JobAssigned` into a `RunAttempt` for the worker's slot, and
 * `JobCancelRequested` into a `StopAttempt` on the worker's control subject.
 */
import { z } from 'zod';
import { BlobRefSchema } from './common.ts';
import { CodeArchiveSchema } from './job.ts';

export const RunAttemptSchema = z.object({
  kind: z.literal('run'),
  jobId: z.string(),
  attemptId: z.string(),
  attempt: z.number().int().min(1),
  gpus: z.array(z.number().int()),
  command: z.string(),
  env: z.record(z.string(), z.string()),
  artifact: BlobRefSchema.nullable(),
  code: CodeArchiveSchema.nullable(),
  /** The job's head right after `JobAssigned`: the worker's `JobStarted` must land on it. */
  head: z.object({ seq: z.number().int(), hash: z.string() }),
});
export type RunAttempt = z.infer<typeof RunAttemptSchema>;

export const StopAttemptSchema = z.object({
  kind: z.literal('stop'),
  jobId: z.string(),
  attemptId: z.string(),
});
export type StopAttempt = z.infer<typeof StopAttemptSchema>;

export const DispatchMessageSchema = z.discriminatedUnion('kind', [RunAttemptSchema, StopAttemptSchema]);
export type DispatchMessage = z.infer<typeof DispatchMessageSchema>;

/** Headers on log messages (`ty.log.<jobId>.<attempt>`); attempt 0 holds the build's output. */
export const LogHeaders = {
  stream: 'Ty-Stream',
  /** Marks the last message of an attempt's log. */
  eof: 'Ty-Eof',
} as const;
