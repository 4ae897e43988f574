export {
  DEFAULT_SCHEDULER_OPTIONS,
  startScheduler,
  type RunningScheduler,
  type SchedulerOptions,
} from './scheduler.ts';
