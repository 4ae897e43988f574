import { DEFAULT_POLICY, type PlacementPolicy } from '@trainyard/domain';

export interface SchedulerOptions {
  leaseTtlMs: number;
  policy: PlacementPolicy;
  /** A snapshot of the cluster state is written after this many events. */
  snapshotEveryEvents: number;
}

export const DEFAULT_SCHEDULER_OPTIONS: SchedulerOptions = {
  leaseTtlMs: 10_000,
  policy: DEFAULT_POLICY,
  snapshotEveryEvents: 10_000,
};
