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
import { masterPort } from '../src/dispatch.ts';
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
  for (const id of ['w1', 'w2', 'w3']) log.append('worker', id, worker(id, [24]));
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
  it('stops every member once one fails, and none once all succeeded', async () => {
    const { log, stopped, command } = harness();
    const attempt = log.state.jobs.get('job_g')!.state.attempts[0]!;
    expect(membersOf(attempt).map((m) => m.workerId)).toEqual(['w1', 'w2', 'w3']);
    for (const m of membersOf(attempt)) command('job_g', { type: 'StartAttempt', attemptId: m.id });
    expect(log.state.jobs.get('job_g')!.state.status).toBe('running');
    const exit = { kind: 'exited', exitCode: 1 } as const;
    const finish = { type: 'FinishAttempt', exit, durationMs: 5, now: T0, jitter: 0 } as const;
    command('job_g', { ...finish, attemptId: 'att-job_g-r2' });
    await drain();
    // The job failed (its own fault: no retry), and every member's worker is told to stop.
    expect(log.state.jobs.has('job_g')).toBe(false);
    expect(stopped).toEqual(['att-job_g', 'att-job_g-r1', 'att-job_g-r2']);

    const other = harness();
    const ids = membersOf(other.log.state.jobs.get('job_g')!.state.attempts[0]!).map((m) => m.id);
    for (const id of ids) other.command('job_g', { type: 'StartAttempt', attemptId: id });
    for (const id of ids)
      other.command('job_g', { ...finish, exit: { kind: 'exited', exitCode: 0 }, attemptId: id });
    await drain();
    expect(other.log.events.at(-1)!.type).toBe('JobSucceeded');
    expect(other.stopped).toEqual([]);
  });

  it('gives up on a gang whose members did not all start within the acceptance time', async () => {
    const { log, clock, stopped, command, deadlines } = harness();
    command('job_g', { type: 'StartAttempt', attemptId: 'att-job_g' });
    deadlines.check();
    clock.advance(ACCEPT_MS - 1);
    await drain();
    expect(log.state.jobs.get('job_g')!.state.status).toBe('assigned');
    clock.advance(1);
    await drain();
    const state = log.state.jobs.get('job_g')!.state;
    expect(state.status).toBe('retrying');
    expect(state.failure).toMatchObject({
      reason: 'gangIncomplete',
      message: 'ranks 1, 2 did not start within 60s of the assignment',
    });
    expect(stopped).toEqual(['att-job_g', 'att-job_g-r1', 'att-job_g-r2']);
  });

  it('gives rank 0 a port from the range, by the attempt', () => {
    const port = masterPort('att_01HZX');
    expect(port).toBe(masterPort('att_01HZX'));
    expect(port).toBeGreaterThanOrEqual(29_500);
    expect(port).toBeLessThan(30_500);
    // Spread over the range: 1,000 attempts draw some 630 ports of the thousand.
    const ports = new Set(Array.from({ length: 1000 }, (_, i) => masterPort(`att_${i}`)));
    expect(ports.size).toBeGreaterThan(550);
  });
});
