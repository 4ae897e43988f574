/**
 * Services (`kind: "service"`): jobs that run until stopped. Each attempt is given ports from a
 * range of its own on its worker; whenever it ends by itself (it exited, failed its health
 * check, lost its worker), the service is started again after a backoff, for as long as it does
 * not end too soon, too many times in a row.
 */
import type { Failure, JobEvent, JobSpec } from '@trainyard/events';
import { backoffMs, type BackoffPolicy } from '../backoff.ts';
import { failure as failureOf, FREE_RETRIES } from '../failures.ts';
import type { ClusterState, TrackedJob } from '../cluster.ts';
import { slotHolder, type AttemptState, type JobState } from './state.ts';

/** Whether a job of this spec is a service. */
export function isService(spec: JobSpec | null | undefined): boolean {
  return spec?.kind === 'service';
}

/** How many ports a service's attempts are given (1 unless its spec asks for more). */
export function servicePortCount(spec: JobSpec | null | undefined): number {
  return isService(spec) ? (spec?.ports ?? 1) : 0;
}

/** The first port a service may be given. */
const SERVICE_PORT_BASE = 30_500;
/** How many ports, from the first, services may be given. */
const SERVICE_PORTS = 1_000;

/** A hash of an attempt's id: where its search for free ports begins. */
function portHash(attemptId: string): number {
  let hash = 2_166_136_261;
  for (let i = 0; i < attemptId.length; i++) {
    hash = Math.imul(hash ^ attemptId.charCodeAt(i), 16_777_619) >>> 0;
  }
  return hash;
}

/**
 * `count` ports of the `size` from `base`, drawn by the attempt's id, past those `taken`; where
 * too few are free, taken ones too (the attempt may fail to listen, and is started again), but
 * never one twice.
 */
export function drawPorts(
  base: number,
  size: number,
  count: number,
  attemptId: string,
  taken: ReadonlySet<number>,
): number[] {
  const hash = portHash(attemptId);
  const ports: number[] = [];
  for (let i = 0; i < size && ports.length < count; i++) {
    const port = base + ((hash + i) % size);
    if (!taken.has(port)) ports.push(port);
  }
  for (let i = 0; i < size && ports.length < count; i++) {
    const port = base + ((hash + i) % size);
    if (!ports.includes(port)) ports.push(port);
  }
  return ports;
}

/**
 * The ports a new attempt of a service is given on `workerId`: past those the live services
 * there hold, and those `chosen` for attempts being assigned there in the same round.
 */
export function servicePortsFor(
  jobs: Iterable<{ state: JobState }>,
  workerId: string,
  attemptId: string,
  count: number,
  chosen: Iterable<number> = [],
): number[] {
  const taken = new Set<number>(chosen);
  for (const { state } of jobs) {
    const live = slotHolder(state);
    if (live?.workerId === workerId) for (const port of live.ports) taken.add(port);
  }
  return drawPorts(SERVICE_PORT_BASE, SERVICE_PORTS, count, attemptId, taken);
}

/**
 * The jobs whose live attempt has its rank 0 on `workerId`: those that may hold ports there (a
 * service's, a gang's `MASTER_PORT`). Read from what holds the workers, not from every job.
 */
export function liveOnWorker(cluster: ClusterState, workerId: string): TrackedJob[] {
  const live: TrackedJob[] = [];
  for (const [key, holding] of cluster.holding.jobs) {
    if (holding.workerId !== workerId || key.includes('#')) continue;
    const job = cluster.jobs.get(key);
    if (job) live.push(job);
  }
  return live;
}

/** A service that ran this long before it ended is started again as if for the first time. */
export const SERVICE_STABLE_MS = 10 * 60_000;

/** Failures of a plain job that would not be retried, after which a service starts again. */
const RESTARTS = new Set(['nonZeroExit', 'killedBySignal', 'oomKilled']);

/** What one end of an attempt is made of: its failure and exit, and what a retry is timed by. */
export interface AttemptEnding {
  failure: Failure | null;
  exitCode: number | null;
  durationMs: number;
  now: Date;
  jitter: number;
  policy: BackoffPolicy;
}

/**
 * A service's attempt ended by itself: it is started again after a backoff that grows with its
 * quick ends in a row (see `quick`). More than its spec's `maxRetries` quick ends in a row fail
 * it, as does a failure no start could mend (its setup, its archive); a service that ran a while
 * and then ended is always started again.
 */
export function restartService(
  state: JobState,
  attempt: AttemptState,
  ending: AttemptEnding,
): JobEvent {
  const { exitCode, now, jitter, policy } = ending;
  // A failure its worker could not time (the worker was lost) ran from its start to now.
  const durationMs =
    ending.durationMs > 0 || !attempt.startedAt
      ? ending.durationMs
      : Math.max(0, now.getTime() - Date.parse(attempt.startedAt));
  const failure =
    ending.failure ??
    failureOf(
      'serviceExited',
      `the service's command exited with code ${exitCode ?? 0}; a service runs until it is stopped`,
    );
  const restarts = failure.retryable || RESTARTS.has(failure.reason);
  const streak = quickEnds(state, attempt, failure, durationMs);
  const again = restarts && streak <= (state.spec?.maxRetries ?? 0);
  const why =
    restarts && !again
      ? {
          ...failure,
          message: `${failure.message}; it ended ${streak} times in a row before it had run ${SERVICE_STABLE_MS / 60_000} minutes (or without ever answering its health check healthy): not started again`,
        }
      : failure;
  const wait = backoffMs(Math.max(1, streak), jitter, policy);
  const retry = again
    ? { retryAt: new Date(now.getTime() + wait).toISOString(), backoffMs: wait }
    : null;
  const data = { attemptId: attempt.id, exitCode, failure: why, durationMs, retry };
  return { type: 'JobAttemptFailed', data };
}

/**
 * Whether an attempt that ended with `failure` after `durationMs` ended quickly: before it had
 * run `SERVICE_STABLE_MS`, or without its health check ever answering healthy, however long its
 * grace let it run (a server that never finishes loading).
 */
const quick = (failure: Failure | null, durationMs: number) =>
  failure?.reason === 'neverHealthy' || durationMs < SERVICE_STABLE_MS;

/** How many attempts in a row, to this one, ended quickly (0 when this one did not). */
function quickEnds(
  state: JobState,
  attempt: AttemptState,
  failure: Failure,
  durationMs: number,
): number {
  if (!quick(failure, durationMs)) return 0;
  let streak = 1;
  for (let i = state.attempts.indexOf(attempt) - 1; i >= 0; i--) {
    const before = state.attempts[i]!;
    const ran =
      before.startedAt && before.finishedAt
        ? Date.parse(before.finishedAt) - Date.parse(before.startedAt)
        : 0;
    // A stop for other work is no end of its own, but a long run before it still counts.
    const free = FREE_RETRIES.has(before.failure?.reason ?? '');
    if (free ? ran >= SERVICE_STABLE_MS : !quick(before.failure, ran)) break;
    if (!free) streak++;
  }
  return streak;
}
