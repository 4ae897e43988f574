/**
 * The dispatch stream's slots: where each worker takes its work from. The messages themselves
 * are in the event catalogue (`DispatchMessageSchema` in `@trainyard/events`).
 */
import { Subjects } from '@trainyard/events';

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
