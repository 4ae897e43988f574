export type { WorkerOptions } from './options.ts';
export { startWorker, type RunningWorker } from './worker.ts';
export { DEFAULT_UID_RANGE, JobUsers, type JobUser } from './users.ts';
