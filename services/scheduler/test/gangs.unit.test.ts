import { afterEach, describe, expect, it } from 'vitest';
import {
  decideJob,
  gangDeadline,
  membersOf,
  plan,
  type JobCommand,
  type TrackedJob,
} from '@trainyard/domain';
import { Deadlines } from '../src/deadlines.ts';
import { Gangs } from '../src/gangs.ts';
import { FakeClock, FakeLog, T0, worker } from './fakes.ts';

const ACCEPT_MS = 60_000;
const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((stop) => stop()));

/** A log with three workers and a gang of three placed on them, and the gangs of a term. */
function harness() {
  const log = new FakeLog();
  const clock = new FakeClock();
  const stopped: string[] = [];
  const gangs = new Gangs({
    stop: (_jobId, attempt) => {
      stopped.push(...membersOf(attempt).map((m) => m.id));
      return Promise.resolve();
    },
    log: { warn: () => undefined },
  });
  const command = (id: string, c: JobCommand) => {
    const job = log.state.jobs.get(id)!;
    for (const e of decideJob(c, job.state)) log.append('job', id, e);
    deliver();
  };
  /** Folds what the log holds, telling the gangs of each job event as the term's reader does. */
  const deliver = () => {
    const from = log.state.lastSeq;
    log.deliver();
    for (const e of log.events.slice(from))
      if (e.aggregate === 'job') gangs.folded(e, log.state.jobs.get(e.aggregateId));
  };
  for (const id of ['w1', 'w2', 'w3']) log.append('worker', id, worker(id, [24], 5));
  log.append('job', 'job_g', {
    type: 'JobSubmitted',
    data: {
      owner: 'alice',
      spec: {
        name: 'ddp',
        command: 'torchrun train.py',
        resources: { gpus: 1, vramGb: 8 },
        nodes: 3,
        priority: 0,
        maxRetries: 3,
        env: {},
      },
    },
  });
  deliver();
  const [a] = plan(log.state, T0).assignments;
  log.assignJob(a!);
  deliver();
  const deadlines = new Deadlines({
    jobs: () => log.state.jobs.values(),
    deadline: (job: TrackedJob) => gangDeadline(job.state, ACCEPT_MS),
    enforce: (job, now) => {
      const attemptId = job.state.attempts.at(-1)!.id;
      command(job.state.id, {
        type: 'AbandonGang',
        attemptId,
        now,
        acceptMs: ACCEPT_MS,
        jitter: 0,
      });
      return Promise.resolve();
    },
    what: 'give up on a gang',
    log: { warn: () => undefined },
    signal: new AbortController().signal,
    clock,
  });
  stops.push(() => deadlines.stop());
  return { log, clock, gangs, stopped, command, deadlines };
}

const drain = () => new Promise((resolve) => setImmediate(resolve));

describe('gang jobs in the scheduler', () => {
  it('stops every member once one fails, and ends the attempt once they all have', async () => {
    const { log, stopped, command } = harness();
    const attempt = log.state.jobs.get('job_g')!.state.attempts[0]!;
    expect(membersOf(attempt).map((m) => m.workerId)).toEqual(['w1', 'w2', 'w3']);
    for (const m of membersOf(attempt)) command('job_g', { type: 'StartAttempt', attemptId: m.id });
    expect(log.state.jobs.get('job_g')!.state.status).toBe('running');
    const finish = (attemptId: string, exitCode: number) =>
      ({
        type: 'FinishAttempt',
        attemptId,
        exit: { kind: 'exited', exitCode },
        durationMs: 5,
        now: T0,
        jitter: 0,
      }) as const;
    command('job_g', finish('att-job_g-r2', 1));
    await drain();
    // Every member's worker is told to stop; the attempt holds its GPUs until they have.
    expect(stopped).toEqual(['att-job_g', 'att-job_g-r1', 'att-job_g-r2']);
    expect(log.state.jobs.get('job_g')!.state.status).toBe('running');
    expect(log.state.workers.get('w1')!.gpus[0]!.attempts).toBe(1);
    command('job_g', finish('att-job_g', 143));
    command('job_g', finish('att-job_g-r1', 143));
    await drain();
    // The job failed (its own fault: no retry), as rank 2 failed it.
    expect(log.state.jobs.has('job_g')).toBe(false);
    expect(log.state.workers.get('w1')!.gpus[0]!.attempts).toBe(0);
    expect(log.events.at(-1)).toMatchObject({
      type: 'JobAttemptFailed',
      data: { failure: { message: 'rank 2 (worker w3): the command exited with code 1' } },
    });

    const other = harness();
    const ids = membersOf(other.log.state.jobs.get('job_g')!.state.attempts[0]!).map((m) => m.id);
    for (const id of ids) other.command('job_g', { type: 'StartAttempt', attemptId: id });
    for (const id of ids) other.command('job_g', finish(id, 0));
    await drain();
    expect(other.log.events.at(-1)!.type).toBe('JobSucceeded');
    expect(other.stopped).toEqual([]);
  });

  it('gives up on members that did not start within the acceptance time, and on those that do not stop', async () => {
    const { log, clock, stopped, command, deadlines } = harness();
    command('job_g', { type: 'StartAttempt', attemptId: 'att-job_g' });
    deadlines.check();
    clock.advance(ACCEPT_MS - 1);
    await drain();
    expect(log.state.jobs.get('job_g')!.state.status).toBe('assigned');
    clock.advance(1);
    await drain();
    // Rank 0 runs: it is told to stop, and holds its GPU until it has, or the time passes again.
    expect(stopped).toEqual(['att-job_g', 'att-job_g-r1', 'att-job_g-r2']);
    expect(log.events.at(-1)).toMatchObject({
      type: 'JobMemberEnded',
      data: { failure: { reason: 'gangIncomplete' } },
    });
    clock.advance(ACCEPT_MS + 1_000);
    await drain();
    const state = log.state.jobs.get('job_g')!.state;
    expect(state.status).toBe('retrying');
    expect(state.failure).toMatchObject({
      reason: 'gangIncomplete',
      message: 'ranks 1, 2 did not start within 60s of the assignment',
    });
    expect(log.state.workers.get('w1')!.gpus[0]!.attempts).toBe(0);
  });
});
