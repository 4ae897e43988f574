import type { JetStreamClient } from '@nats-io/jetstream';
import { DomainError, failure } from '@trainyard/domain';
import { DISPATCH_VERSION, Subjects, type DispatchMessage } from '@trainyard/events';
import { runJobCommand, type JobSnapshot } from '@trainyard/application';
import { publishReliably, type ServiceContext } from '@trainyard/service-kit';

/**
 * Sends a worker the attempt it was assigned; the message id makes resends harmless. A message
 * NATS could never carry fails the attempt at once, as a platform failure that says why, rather
 * than leaving it assigned, holding its slot.
 */
export async function dispatchRun(ctx: ServiceContext, job: JobSnapshot): Promise<void> {
  const { state } = job;
  const attempt = state.attempts[state.attempts.length - 1];
  if (!attempt || !state.spec) return;
  const { config } = ctx;
  const message: DispatchMessage = {
    // A probe needs a worker that reads version 2; all else goes as 1, which every worker reads.
    v: attempt.probe ? DISPATCH_VERSION : 1,
    kind: 'run',
    jobId: state.id,
    attemptId: attempt.id,
    attempt: attempt.number,
    gpus: attempt.gpus,
    command: state.spec.command,
    ...(state.spec.setup && { setup: state.spec.setup }),
    ...(!attempt.probe && state.spec.timeLimit && { timeLimitS: state.spec.timeLimit }),
    env: state.spec.env,
    artifact: state.artifact,
    code: state.artifact ? null : state.code,
    ...(state.image && { image: state.image.ref }),
    ...(state.outputsAttemptId &&
      state.outputsAttemptId !== attempt.id &&
      state.outputs.length > 0 && {
        restore: { attemptId: state.outputsAttemptId, files: state.outputs },
      }),
    resources: {
      vramBytes: attempt.vramBytes,
      cpus: attempt.cpus,
      ...(state.spec.resources.memoryGb && { memoryGb: state.spec.resources.memoryGb }),
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
    attempt.gpus.length > 0
      ? Subjects.dispatchGpu(attempt.workerId, attempt.gpus[0]!)
      : Subjects.dispatchCpu(attempt.workerId);
  const payload = JSON.stringify(message);
  const limit = ctx.bus.nc.info?.max_payload ?? 1024 * 1024;
  if (Buffer.byteLength(payload) > limit) {
    await failUndeliverable(ctx, job, attempt.id, Buffer.byteLength(payload), limit);
    return;
  }
  await publishReliably(ctx.bus.js, subject, payload, `run-${attempt.id}`);
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

/** Tells a worker to stop an attempt whose job is being cancelled or reached its time limit. */
export async function dispatchStop(js: JetStreamClient, job: JobSnapshot): Promise<void> {
  const attempt = job.state.attempts[job.state.attempts.length - 1];
  if (!attempt) return;
  const message: DispatchMessage = {
    v: 1,
    kind: 'stop',
    jobId: job.state.id,
    attemptId: attempt.id,
  };
  await publishReliably(
    js,
    Subjects.dispatchControl(attempt.workerId),
    JSON.stringify(message),
    `stop-${attempt.id}`,
  );
}
