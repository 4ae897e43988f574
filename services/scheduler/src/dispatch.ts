import type { JetStreamClient } from '@nats-io/jetstream';
import { Subjects } from '@trainyard/events';
import { publishReliably, type DispatchMessage, type JobSnapshot } from '@trainyard/platform';

/** Sends a worker the attempt it was assigned; the message id makes resends harmless. */
export async function dispatchRun(js: JetStreamClient, job: JobSnapshot): Promise<void> {
  const { state, head } = job;
  const attempt = state.attempts[state.attempts.length - 1];
  if (!attempt || !state.spec) return;
  const message: DispatchMessage = {
    kind: 'run',
    jobId: state.id,
    attemptId: attempt.id,
    attempt: attempt.number,
    gpus: attempt.gpus,
    command: state.spec.command,
    env: state.spec.env,
    artifact: state.artifact,
    code: state.artifact ? null : state.code,
    job: state,
    head,
  };
  const subject =
    attempt.gpus.length > 0
      ? Subjects.dispatchGpu(attempt.workerId, attempt.gpus[0]!)
      : Subjects.dispatchCpu(attempt.workerId);
  await publishReliably(js, subject, JSON.stringify(message), `run-${attempt.id}`);
}

/** Tells a worker to stop an attempt whose job is being cancelled. */
export async function dispatchStop(js: JetStreamClient, job: JobSnapshot): Promise<void> {
  const attempt = job.state.attempts[job.state.attempts.length - 1];
  if (!attempt) return;
  const message: DispatchMessage = { kind: 'stop', jobId: job.state.id, attemptId: attempt.id };
  await publishReliably(
    js,
    Subjects.dispatchControl(attempt.workerId),
    JSON.stringify(message),
    `stop-${attempt.id}`,
  );
}
