export type { WorkerOptions } from './options.ts';
export { startWorker, type RunningWorker } from './worker.ts';
