/** What the placement policy is tuned by, and how a waiting job's priority ages. */
export const GiB = 1024 ** 3;

export interface PlacementPolicy {
  /** Memory kept free on every GPU beyond what jobs declare. */
  headroomBytes: number;
  /**
   * What a measured job takes on a GPU beyond what its probe measured: the CUDA context and
   * what PyTorch allocates outside its caching allocator, which `max_memory_reserved` leaves out.
   */
  contextBytes: number;
  /**
   * Priority a waiting job or session gains per hour in the queue: what it is placed by is its
   * priority plus its wait times this (whole points), so that newer work of a higher priority
   * cannot pass it forever.
   */
  agingPerHour: number;
  /** The longest a probe runs (`TRAINYARD_PROBE_TIMEOUT_MIN`): when a reservation expects it to end. */
  probeMs: number;
}

export const DEFAULT_POLICY: PlacementPolicy = {
  headroomBytes: GiB,
  contextBytes: GiB / 2,
  agingPerHour: 10,
  probeMs: 10 * 60_000,
};

const HOUR = 3_600_000;

/**
 * What a candidate is placed by: its priority, plus the whole points it gained waiting since
 * `queuedAtMs`.
 */
export function effectivePriority(
  priority: number,
  queuedAtMs: number,
  now: Date,
  policy: Pick<PlacementPolicy, 'agingPerHour'>,
): number {
  const waitedMs = now.getTime() - queuedAtMs;
  if (!(waitedMs > 0)) return priority;
  // Whole points: between near-equals, the order of the log decides, not the writers' clocks.
  return priority + Math.floor((waitedMs / HOUR) * policy.agingPerHour);
}
