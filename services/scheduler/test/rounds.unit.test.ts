import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_POLICY, GiB, type Assignment } from '@trainyard/domain';
import { Rounds } from '../src/rounds.ts';
import { FakeClock, FakeLog, submitted, T0, worker } from './fakes.ts';

interface Harness {
  log: FakeLog;
  clock: FakeClock;
  rounds: Rounds;
  /** Every assignment asked for, in order, with the time its round planned at. */
  asked: { assignment: Assignment; now: Date }[];
  /** How often the rounds read the log's last sequence. */
  lastSeqReads: () => number;
  /** The messages of the errors the rounds logged. */
  errors: string[];
}

const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((stop) => stop()));

/**
 * Rounds over a fake log and a fake clock. `assign` is what each assignment does after it is
 * recorded; by default it appends the assignment and answers with the sequence it landed at.
 */
function harness(assign?: (a: Assignment, log: FakeLog) => Promise<number>): Harness {
  const log = new FakeLog();
  const clock = new FakeClock();
  const asked: Harness['asked'] = [];
  const errors: string[] = [];
  let reads = 0;
  const stop = new AbortController();
  const rounds = new Rounds({
    state: () => log.state,
    policy: DEFAULT_POLICY,
    assign: (assignment, now) => {
      asked.push({ assignment, now });
      return assign ? assign(assignment, log) : Promise.resolve(log.assignJob(assignment));
    },
    preempt: () => Promise.reject(new Error('nothing here is preemptible')),
    lastSeq: () => {
      reads++;
      return log.lastSeq();
    },
    log: {
      warn: () => undefined,
      error: (_obj: unknown, msg?: string) => void errors.push(msg ?? ''),
    },
    signal: stop.signal,
    clock,
  });
  log.onDelivered = () => rounds.wakeSoon();
  stops.push(() => {
    stop.abort();
    rounds.stop();
  });
  return { log, clock, rounds, asked, lastSeqReads: () => reads, errors };
}

/** Lets every turn of the event loop that is pending run, and the promises they settle. */
async function drain(): Promise<void> {
  for (let i = 0; i < 10; i++) await new Promise((resolve) => setImmediate(resolve));
}

const jobsAsked = (h: Harness) => h.asked.map((a) => a.assignment.id);

describe('planning rounds', () => {
  it('places a queued job on a registered worker with free GPUs', async () => {
    const h = harness();
    h.log.append('worker', 'w1', worker('w1', [24, 24]));
    h.log.append('job', 'j1', submitted({ gpus: 1, vramGb: 8 }));
    h.log.deliver();
    await drain();

    expect(h.asked).toEqual([
      {
        assignment: {
          kind: 'job',
          id: 'j1',
          workerId: 'w1',
          gpus: [0],
          vramBytes: 8 * GiB,
          cpus: 0,
        },
        now: T0,
      },
    ]);
  });

  it('answers the wake-ups that come during a round with exactly one more round', async () => {
    let answerFirst!: () => void;
    const firstAnswered = new Promise<void>((resolve) => (answerFirst = resolve));
    let calls = 0;
    const h = harness((a, log) => {
      if (calls++ > 0) return Promise.resolve(0);
      const landed = log.assignJob(a);
      return firstAnswered.then(() => landed);
    });
    h.log.append('worker', 'w1', worker('w1', [24, 24, 24, 24]));
    h.log.append('job', 'j1', submitted({ gpus: 1 }));
    h.log.deliver();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1']);

    h.log.append('job', 'j2', submitted({ gpus: 1 }));
    h.log.deliver();
    h.rounds.wake();
    h.rounds.wake();
    h.rounds.wakeSoon();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1']);

    // j2's assignment comes back as no longer applying, so j2 stays queued in the state: any
    // round after the second would ask for it again.
    answerFirst();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1', 'j2']);
  });

  it('plans again only once the log has brought back the last round’s assignments', async () => {
    const h = harness();
    h.log.append('worker', 'w1', worker('w1', [24, 24]));
    h.log.append('job', 'j1', submitted({ gpus: 1 }));
    h.log.deliver();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1']);
    const landed = h.log.events.length;

    h.rounds.wake();
    h.rounds.wakeSoon();
    await drain();
    expect(h.log.state.lastSeq).toBeLessThan(landed);
    expect(jobsAsked(h)).toEqual(['j1']);

    h.log.append('job', 'j2', submitted({ gpus: 1 }));
    h.log.deliver();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1', 'j2']);
    expect(h.asked[1]!.assignment.gpus).toEqual([1]);
  });

  it('places a job in retry backoff once the clock passes its retry time, not before', async () => {
    const h = harness();
    const retryAt = new Date(T0.getTime() + 5_000);
    h.log.append('worker', 'w1', worker('w1', [24]));
    h.log.append('job', 'j1', submitted({ gpus: 1 }));
    h.log.append('job', 'j1', {
      type: 'JobAssigned',
      data: {
        attemptId: 'a1',
        attempt: 1,
        workerId: 'w1',
        gpus: [0],
        vramBytes: 24 * GiB,
        cpus: 0,
      },
    });
    h.log.append('job', 'j1', {
      type: 'JobAttemptFailed',
      data: {
        attemptId: 'a1',
        exitCode: null,
        durationMs: 1,
        failure: { kind: 'system', reason: 'launchError', message: 'x', retryable: true },
        retry: { retryAt: retryAt.toISOString(), backoffMs: 5_000 },
      },
    });
    h.log.deliver();
    await drain();
    expect(h.asked).toEqual([]);

    h.clock.advance(4_999);
    await drain();
    expect(h.asked).toEqual([]);

    h.clock.advance(10);
    await drain();
    expect(jobsAsked(h)).toEqual(['j1']);
    expect(h.asked[0]!.now).toEqual(new Date(retryAt.getTime() + 5));
  });

  it('places work an hour quota held back when the month turns, waking an hour at a time', async () => {
    const h = harness();
    const HOUR = 3_600_000;
    h.log.append('worker', 'w1', worker('w1', [24]));
    h.log.append('user', 'alice', { type: 'UserGpuHoursQuotaSet', data: { maxGpuHours: 1 } });
    h.log.append('job', 'j1', submitted({ gpus: 1 }));
    h.log.append('job', 'j1', {
      type: 'JobAssigned',
      data: {
        attemptId: 'a1',
        attempt: 1,
        workerId: 'w1',
        gpus: [0],
        vramBytes: 24 * GiB,
        cpus: 0,
      },
    });
    h.log.append(
      'job',
      'j1',
      { type: 'JobSucceeded', data: { attemptId: 'a1', durationMs: 2 * HOUR } },
      new Date(T0.getTime() + 2 * HOUR),
    );
    h.log.append('job', 'j2', submitted({ gpus: 1 }));
    h.log.deliver();
    await drain();
    expect(h.asked).toEqual([]);

    const february = Date.parse('2026-02-01T00:00:00Z');
    h.clock.advance(february - T0.getTime() - 1);
    await drain();
    expect(h.asked).toEqual([]);
    h.clock.advance(HOUR);
    await drain();
    expect(jobsAsked(h)).toEqual(['j2']);
    expect(h.asked[0]!.now.getTime()).toBe(february + 5);
  });

  it('pauses after a failed assignment, then waits for the log’s end before planning', async () => {
    let fail = true;
    const h = harness((a, log) => {
      const landed = log.assignJob(a);
      if (!fail) return Promise.resolve(landed);
      fail = false;
      return Promise.reject(new Error('the append got no answer'));
    });
    h.log.append('worker', 'w1', worker('w1', [24]));
    h.log.append('job', 'j1', submitted({ gpus: 1 }));
    h.log.append('job', 'j2', submitted({ gpus: 1 }));
    h.log.deliver();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1']);
    expect(h.errors).toEqual(['scheduling round failed; planning again after the log']);

    h.clock.advance(499);
    await drain();
    expect(h.lastSeqReads()).toBe(0);

    h.clock.advance(1);
    await drain();
    expect(h.lastSeqReads()).toBe(1);
    expect(h.log.state.lastSeq).toBeLessThan(await h.log.lastSeq());
    expect(jobsAsked(h)).toEqual(['j1']);

    h.log.append('job', 'j1', {
      type: 'JobSucceeded',
      data: { attemptId: 'att-j1', durationMs: 1 },
    });
    h.log.deliver();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1', 'j2']);
  });

  it('plans again by itself after the pause when the failed append never landed', async () => {
    let calls = 0;
    const h = harness((a, log) =>
      calls++ === 0 ? Promise.reject(new Error('refused')) : Promise.resolve(log.assignJob(a)),
    );
    h.log.append('worker', 'w1', worker('w1', [24]));
    h.log.append('job', 'j1', submitted({ gpus: 1 }));
    h.log.deliver();
    await drain();
    expect(jobsAsked(h)).toEqual(['j1']);

    h.clock.advance(500);
    await drain();
    expect(h.lastSeqReads()).toBe(1);
    expect(jobsAsked(h)).toEqual(['j1', 'j1']);
  });
});
