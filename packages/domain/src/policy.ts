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
   * Priority a waiting job or session gains per hour in the queue, a point at each of the clock's
   * aging ticks (every 6 minutes at 10 an hour) since it was queued: so that newer work of a
   * higher priority cannot pass it forever.
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
 * The aging ticks of the clock up to `ms` (since the epoch): `agingPerHour` an hour, one point of
 * priority each.
 */
export const agingTick = (ms: number, policy: Pick<PlacementPolicy, 'agingPerHour'>): number =>
  policy.agingPerHour > 0 ? Math.floor((ms / HOUR) * policy.agingPerHour) : 0;

/**
 * What a candidate is placed by: its priority, plus a point for each aging tick of the clock
 * since `queuedAtMs`. Ticks are the clock's, not the job's: what was queued between two ticks
 * ages alike, and between those the order of the log decides, not the writers' clocks; and the
 * order of two waiting jobs changes only when one's own priority does (`waiting.ts`).
 */
export function effectivePriority(
  priority: number,
  queuedAtMs: number,
  now: Date,
  policy: Pick<PlacementPolicy, 'agingPerHour'>,
): number {
  return priority + Math.max(0, agingTick(now.getTime(), policy) - agingTick(queuedAtMs, policy));
}
