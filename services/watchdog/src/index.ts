export {
  DEFAULT_WATCHDOG_OPTIONS,
  startWatchdog,
  type RunningWatchdog,
  type WatchdogOptions,
} from './watchdog.ts';
