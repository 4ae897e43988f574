import type { JetStreamClient } from '@nats-io/jetstream';
import {
  DomainError,
  failure,
  gangSize,
  masterPortFor,
  membersOf,
  type AttemptState,
} from '@trainyard/domain';
import {
  GANG_DISPATCH_VERSION,
  SERVICE_DISPATCH_VERSION,
  Subjects,
  type DispatchMessage,
} from '@trainyard/events';
import { runJobCommand, type JobSnapshot } from '@trainyard/application';
import { publishReliably, type ServiceContext } from '@trainyard/service-kit';

/** Where other workers reach a worker, by its id: its registered address. */
export type AddressOf = (workerId: string) => string;

/**
 * Sends each worker of the attempt (one, or a gang's members) what it was assigned; the message
 * id makes resends harmless. A message NATS could never carry fails the attempt at once, as a
 * platform failure that says why, rather than leaving it assigned, holding its slot.
 */
export async function dispatchRun(
  ctx: ServiceContext,
  job: JobSnapshot,
  addressOf: AddressOf,
): Promise<void> {
  const { state } = job;
  const attempt = state.attempts[state.attempts.length - 1];
  if (!attempt || !state.spec) return;
  const size = gangSize(attempt);
  for (const member of membersOf(attempt)) {
    const gang = size > 1 && {
      WORLD_SIZE: String(size),
      RANK: String(member.rank),
      NODE_RANK: String(member.rank),
      LOCAL_RANK: '0',
      MASTER_ADDR: addressOf(attempt.workerId),
      MASTER_PORT: String(attempt.masterPort ?? masterPortFor([], attempt.workerId, attempt.id)),
    };
    const sent = await dispatchMember(ctx, job, attempt, member, gang || {});
    if (!sent) return;
  }
}

/** What a service's command is told of its ports: the first as `TRAINYARD_PORT` and `PORT`. */
function serviceEnv(ports: readonly number[]): Record<string, string> {
  if (ports.length === 0) return {};
  return {
    TRAINYARD_PORT: String(ports[0]),
    PORT: String(ports[0]),
    TRAINYARD_PORTS: ports.join(','),
  };
}

/** Sends one member its part of the attempt: false when it could not be, and the attempt failed. */
async function dispatchMember(
  ctx: ServiceContext,
  job: JobSnapshot,
  attempt: AttemptState,
  member: ReturnType<typeof membersOf>[number],
  gangEnv: Record<string, string>,
): Promise<boolean> {
  const { state } = job;
  const spec = state.spec!;
  const { config } = ctx;
  const message: DispatchMessage = {
    // A probe needs a worker that reads version 2, a gang's member 5, a service 6; all else goes
    // as 1, which every worker reads.
    v: attempt.probe
      ? 2
      : gangSize(attempt) > 1
        ? GANG_DISPATCH_VERSION
        : attempt.ports.length > 0
          ? SERVICE_DISPATCH_VERSION
          : 1,
    kind: 'run',
    jobId: state.id,
    attemptId: member.id,
    attempt: attempt.number,
    gpus: member.gpus,
    command: spec.command,
    ...(spec.setup && { setup: spec.setup }),
    ...(!attempt.probe && spec.timeLimit && { timeLimitS: spec.timeLimit }),
    ...(member.rank > 0 && { rank: member.rank }),
    ...(attempt.ports.length > 0 && {
      service: { ports: attempt.ports, ...(spec.health && { health: spec.health }) },
    }),
    env: { ...spec.env, ...gangEnv, ...serviceEnv(attempt.ports) },
    artifact: state.artifact,
    code: state.artifact ? null : state.code,
    ...(state.image && { image: state.image.ref }),
    ...(state.outputsAttemptId &&
      state.outputsAttemptId !== attempt.id &&
      state.outputs.length > 0 && {
        restore: { attemptId: state.outputsAttemptId, files: state.outputs },
      }),
    resources: {
      vramBytes: member.vramBytes,
      cpus: member.cpus,
      ...(spec.resources.memoryGb && { memoryGb: spec.resources.memoryGb }),
    },
    ...(attempt.probe && {
      probe: {
        maxSteps: config.TRAINYARD_PROBE_MAX_STEPS,
        plateauSteps: config.TRAINYARD_PROBE_PLATEAU_STEPS,
        timeoutMs: Math.round(config.TRAINYARD_PROBE_TIMEOUT_MIN * 60_000),
      },
    }),
    headSeq: job.head.seq,
  };
  const subject =
    member.gpus.length > 0
      ? Subjects.dispatchGpu(member.workerId, member.gpus[0]!)
      : Subjects.dispatchCpu(member.workerId);
  const payload = JSON.stringify(message);
  const limit = ctx.bus.nc.info?.max_payload ?? 1024 * 1024;
  if (Buffer.byteLength(payload) > limit) {
    await failUndeliverable(ctx, job, attempt.id, Buffer.byteLength(payload), limit);
    return false;
  }
  await publishReliably(ctx.bus.js, subject, payload, `run-${member.id}`);
  return true;
}

async function failUndeliverable(
  ctx: ServiceContext,
  job: JobSnapshot,
  attemptId: string,
  bytes: number,
  limit: number,
): Promise<void> {
  const message = `its dispatch is ${bytes} bytes, over the ${limit} bytes NATS carries`;
  ctx.log.error({ jobId: job.state.id, attemptId, bytes, limit }, 'attempt cannot be dispatched');
  try {
    await runJobCommand(
      ctx.bus.store,
      job.state.id,
      () => ({
        type: 'FailAttempt',
        attemptId,
        failure: failure('dispatchFailed', message),
        now: new Date(),
        jitter: Math.random(),
      }),
      { actor: { kind: 'service', id: ctx.instanceId }, now: new Date() },
      { snapshot: job },
    );
  } catch (err) {
    if (!(err instanceof DomainError)) throw err;
  }
}

/**
 * Tells a worker to stop an attempt whose job is being cancelled or reached its time limit: each
 * member's worker, for a gang's.
 */
export async function dispatchStop(js: JetStreamClient, job: JobSnapshot): Promise<void> {
  const attempt = job.state.attempts[job.state.attempts.length - 1];
  if (attempt) await stopMembers(js, job.state.id, attempt, job.head.seq);
}

/**
 * Tells the worker of each member of an attempt to stop it, for the event at `causeSeq`: a stop
 * sent again for the same event is dropped as a duplicate, one for a later event is not.
 */
export async function stopMembers(
  js: JetStreamClient,
  jobId: string,
  attempt: AttemptState,
  causeSeq: number,
): Promise<void> {
  for (const member of membersOf(attempt)) {
    const message: DispatchMessage = { v: 1, kind: 'stop', jobId, attemptId: member.id };
    await publishReliably(
      js,
      Subjects.dispatchControl(member.workerId),
      JSON.stringify(message),
      `stop-${member.id}-${causeSeq}`,
    );
  }
}
