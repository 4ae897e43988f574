export { startScheduler, type RunningScheduler } from './leadership.ts';
export { DEFAULT_SCHEDULER_OPTIONS, type SchedulerOptions } from './options.ts';
