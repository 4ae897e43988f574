import type {
  AttemptStatus,
  HoldBy,
  JobKind,
  JobStatus,
  SessionStatus,
  SessionStopReason,
} from '@trainyard/events';
import { isTerminal } from '@trainyard/domain';
import type { AttemptRow, JobRow, SessionRow, SshKeyRow, WorkerRow } from '@trainyard/projections';
import type { LastBeat } from './heartbeats.ts';

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/** Hours from seconds, to the hundredth of a second. */
export const gpuHours = (seconds: number) => Math.round(seconds / 0.0036) / 1e6;

/** The GPU-hours an attempt held: its GPUs (on each of a gang's workers), from its assignment to its end (or now). */
const heldBy = (a: AttemptRow, now = Date.now()) =>
  gpuHours(
    (a.gpus.length *
      (1 + a.members.length) *
      ((a.finished_at?.getTime() ?? now) - a.assigned_at.getTime())) /
      1000,
  );

/** The public shape of a job. */
export function jobView(job: JobRow, attempts?: AttemptRow[]) {
  return {
    id: job.id,
    name: job.name,
    owner: job.owner,
    team: job.team,
    status: job.status as JobStatus,
    priority: job.priority,
    command: job.command,
    image: job.image,
    imageDigest: job.image_digest,
    resources: job.resources,
    estimate: job.estimate,
    maxRetries: job.max_retries,
    timeLimit: job.time_limit,
    preemptible: job.preemptible,
    shards: job.shards,
    nodes: job.nodes,
    kind: job.kind as JobKind,
    health: job.health,
    shardOf: job.shard_of === null ? null : { jobId: job.shard_of, index: job.shard_index ?? 0 },
    dependsOn: job.depends_on,
    dependenciesMet: job.dependencies_met,
    // A job that ended is held no more, whatever hold it had.
    held:
      job.held_by === null || isTerminal(job.status as JobStatus)
        ? null
        : { by: job.held_by as HoldBy, reason: job.hold_reason ?? '' },
    envNames: job.env_names,
    createdAt: job.created_at.toISOString(),
    startedAt: iso(job.started_at),
    finishedAt: iso(job.finished_at),
    exitCode: job.exit_code,
    failure: job.failure,
    retryAt: iso(job.retry_at),
    attemptCount: job.attempt_count,
    seq: job.last_seq,
    ...(attempts && {
      attempts: attempts.map((a) => ({
        number: a.number,
        id: a.id,
        workerId: a.worker_id,
        gpus: a.gpus,
        ...(a.members.length > 0 && {
          members: a.members.map((m) => ({ workerId: m.workerId, gpus: m.gpus })),
        }),
        ...(a.ports.length > 0 && { ports: a.ports }),
        probe: a.probe,
        status: a.status as AttemptStatus,
        exitCode: a.exit_code,
        failure: a.failure,
        assignedAt: a.assigned_at.toISOString(),
        startedAt: iso(a.started_at),
        finishedAt: iso(a.finished_at),
        gpuHours: heldBy(a),
      })),
      gpuHours: gpuHours(attempts.reduce((sum, a) => sum + heldBy(a) * 3600, 0)),
    }),
  };
}

/**
 * The public shape of a worker, its GPUs with their use as its last heartbeat read it; where it
 * runs is for admins only.
 */
export function workerView(w: WorkerRow, beat: LastBeat | null, admin: boolean) {
  return {
    id: w.id,
    hostname: admin ? w.hostname : null,
    status: w.status,
    simulated: w.gpus.some((g) => g.simulated),
    gpus: w.gpus.map((g) => {
      const use = beat?.gpus.find((u) => u.index === g.index);
      return { ...g, usedBytes: use?.usedBytes ?? null, utilPct: use?.utilPct ?? null };
    }),
    cpuSlots: w.cpu_slots,
    runtime: w.runtime,
    version: w.version,
    registeredAt: w.registered_at.toISOString(),
    lastHeartbeatAt: beat?.at ?? null,
  };
}

const MINUTE = 60_000;

/**
 * When a running session's first timer runs out, as its row stands: the hard cap, and either
 * the connect timer (no login yet) or the idle timer (no channel open). The watchdog decides;
 * this only tells the user what to expect.
 */
function stopsAt(s: SessionRow): string | null {
  if (s.status !== 'running' || !s.started_at) return null;
  const started = s.started_at.getTime();
  const ends = [started + s.timers.maxMin * MINUTE];
  if (!s.connected_at) ends.push(started + s.timers.connectMin * MINUTE);
  else if (!s.active && s.idle_since) ends.push(s.idle_since.getTime() + s.timers.idleMin * MINUTE);
  return new Date(Math.min(...ends)).toISOString();
}

/** The public shape of a session. */
export function sessionView(s: SessionRow) {
  return {
    id: s.id,
    name: s.name,
    owner: s.owner,
    team: s.team,
    status: s.status as SessionStatus,
    resources: s.resources,
    timers: s.timers,
    fromJob: s.from_job,
    image: s.base_image,
    imageDigest: s.image_digest,
    workerId: s.worker_id,
    runId: s.run_id,
    runs: s.runs,
    gpus: s.gpus,
    active: s.active,
    stopReason: s.stop_reason as SessionStopReason | null,
    failure: s.failure,
    requeuedBecause: s.requeued_because,
    requestedAt: s.requested_at.toISOString(),
    startedAt: iso(s.started_at),
    connectedAt: iso(s.connected_at),
    lastLoginAt: iso(s.last_login_at),
    endedAt: iso(s.ended_at),
    stopsAt: stopsAt(s),
    seq: s.last_seq,
  };
}

/** The public shape of a registered SSH key. */
export function sshKeyView(k: SshKeyRow) {
  return {
    fingerprint: k.fingerprint,
    type: k.public_key.split(' ')[0] ?? '',
    publicKey: k.public_key,
    name: k.name,
    addedAt: k.added_at.toISOString(),
  };
}

export type JobView = ReturnType<typeof jobView>;
export type SessionView = ReturnType<typeof sessionView>;
export type WorkerView = ReturnType<typeof workerView>;
