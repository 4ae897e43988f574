import type { Aggregate, JobEvent, JobSpec, StoredEvent } from '@trainyard/events';
import { storedEvent } from '@trainyard/testkit';
import {
  decideJob,
  evolveCluster,
  evolveJob,
  GiB,
  initialJobState,
  plan,
  type ClusterState,
  type JobCommand,
  type JobState,
} from '../src/index.ts';

export const T0 = new Date('2026-01-01T00:00:00.000Z');

export const spec = (over: Partial<JobSpec> = {}): JobSpec => ({
  name: 'train',
  command: 'python train.py',
  resources: { gpus: 1, vramGb: 8 },
  priority: 0,
  maxRetries: 3,
  env: {},
  ...over,
});

/** Folds `events` (given) into a job state. */
export function given(events: JobEvent[], id = 'job_1'): JobState {
  return events.reduce((s, e) => evolveJob(s, e, T0.toISOString()), initialJobState(id));
}

/** Given events, when a command: the events the decider answers with. */
export function when(events: JobEvent[], command: JobCommand): JobEvent[] {
  return decideJob(command, given(events));
}

let seq = 0;
/** Wraps events as stored ones for the cluster fold, with increasing sequences. */
export function stored<E extends { type: string; data: unknown }>(
  aggregate: Aggregate,
  id: string,
  event: E,
  at = T0,
): StoredEvent {
  return storedEvent(aggregate, id, event, { seq: ++seq, at });
}

export const submitted = (s: JobSpec = spec()): JobEvent => ({
  type: 'JobSubmitted',
  data: { owner: 'alice', spec: s },
});
export const assigned = (attemptId = 'a1', attempt = 1, gpus = [0]): JobEvent => ({
  type: 'JobAssigned',
  data: { attemptId, attempt, workerId: 'w1', gpus, vramBytes: 8 * 1024 ** 3, cpus: 0 },
});
export const started = (attemptId = 'a1'): JobEvent => ({
  type: 'JobStarted',
  data: { attemptId },
});

/** A worker registering into `cluster` with one GPU per entry of `gpuGb`, of that many GiB. */
export function worker(
  cluster: ClusterState,
  id: string,
  gpuGb: number[],
  cpuSlots = 0,
  model = 'sim',
  runtime = 'process',
  limitsMemory?: boolean,
  dispatchVersion?: number,
) {
  evolveCluster(
    cluster,
    stored('worker', id, {
      type: 'WorkerRegistered',
      data: {
        name: id,
        hostname: 'h',
        cpuSlots,
        runtime,
        ...(limitsMemory !== undefined && { limitsMemory }),
        ...(dispatchVersion !== undefined && { dispatchVersion }),
        version: 't',
        gpus: gpuGb.map((gb, index) => ({
          index,
          name: model,
          uuid: `${id}-${index}`,
          vramBytes: gb * GiB,
          simulated: true,
        })),
      },
    }),
  );
}

/** A job of `owner` submitted into `cluster`. */
export function submit(cluster: ClusterState, id: string, s: Partial<JobSpec>, owner = 'alice') {
  evolveCluster(
    cluster,
    stored('job', id, { type: 'JobSubmitted', data: { owner, spec: spec(s) } }),
  );
}

/** Assigns what a round places, as the scheduler would. */
export function commit(cluster: ClusterState) {
  for (const a of plan(cluster, T0).assignments) {
    evolveCluster(
      cluster,
      stored('job', a.id, {
        type: 'JobAssigned',
        data: {
          attemptId: `att-${a.id}`,
          attempt: 1,
          workerId: a.workerId,
          gpus: a.gpus,
          vramBytes: a.vramBytes,
          cpus: a.cpus,
          ...(a.members && { members: a.members }),
        },
      }),
    );
  }
}

/** Assigns and starts what a round at `when` places, as the scheduler and workers would. */
export function run(cluster: ClusterState, when = T0): string[] {
  const { assignments } = plan(cluster, when);
  for (const a of assignments) {
    const attemptId = `att-${a.id}`;
    const { workerId, gpus, vramBytes, cpus, members } = a;
    const data = {
      attemptId,
      attempt: 1,
      workerId,
      gpus,
      vramBytes,
      cpus,
      ...(members && { members }),
    };
    evolveCluster(cluster, stored('job', a.id, { type: 'JobAssigned', data }, when));
    evolveCluster(cluster, stored('job', a.id, { type: 'JobStarted', data: { attemptId } }, when));
  }
  return assignments.map((a) => a.id);
}

/** The attempt `run` started for job `id` succeeds at `when`. */
export function succeed(cluster: ClusterState, id: string, when: Date) {
  const data = { attemptId: `att-${id}`, durationMs: 1 };
  evolveCluster(cluster, stored('job', id, { type: 'JobSucceeded', data }, when));
}
