/**
 * Messages on the dispatch stream. They are derived from committed events, never the truth:
 * the scheduler turns `JobAssigned` into a `RunAttempt` for the worker's slot, and
 * `JobCancelRequested` into a `StopAttempt` on the worker's control subject. A worker decides
 * nothing on them: what it reports is decided on the log by the control plane.
 */
import { z } from 'zod';
import { BlobRefSchema, CodeArchiveSchema, Subjects } from '@trainyard/events';

/** The most GPUs one worker may offer: its credential names a dispatch consumer for each. */
export const MAX_GPUS_PER_WORKER = 16;

/** A slot a worker takes work from: one per GPU, its CPU pool, and its control subject. */
export interface DispatchSlot {
  name: string;
  subject: string;
  /** The durable consumer of the dispatch stream that serves it. */
  durable: string;
}

const slot = (workerId: string, name: string, subject: string): DispatchSlot => ({
  name,
  subject,
  durable: `worker_${workerId}_${name}`,
});

/**
 * The slots of a worker with these GPUs and CPU slots. The control plane makes their consumers
 * when the worker registers; the worker only reads from them.
 */
export function dispatchSlots(
  workerId: string,
  gpuIndexes: number[],
  cpuSlots: number,
): DispatchSlot[] {
  return [
    ...gpuIndexes.map((i) => slot(workerId, `gpu${i}`, Subjects.dispatchGpu(workerId, i))),
    ...(cpuSlots > 0 ? [slot(workerId, 'cpu', Subjects.dispatchCpu(workerId))] : []),
    slot(workerId, 'ctl', Subjects.dispatchControl(workerId)),
  ];
}

/** Every slot a worker could ever have: what its credential lets it read. */
export const possibleDispatchSlots = (workerId: string): DispatchSlot[] =>
  dispatchSlots(
    workerId,
    Array.from({ length: MAX_GPUS_PER_WORKER }, (_, i) => i),
    1,
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
