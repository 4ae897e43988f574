import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { EMPTY_HEAD, EventStore, type StoredEvent } from '@trainyard/events';
import { jobSubmitted, startTestNats, testMeta, waitFor } from '@trainyard/testkit';
import { connectBus, SharedLog, subjectMatches, type Bus } from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'shared-log-test');
});
afterAll(async () => {
  await bus.close();
  await nats.stop();
});

async function append(aggregate: 'job' | 'worker', id: string): Promise<number> {
  const event =
    aggregate === 'job'
      ? jobSubmitted()
      : {
          type: 'WorkerRegistered' as const,
          data: {
            name: id,
            hostname: 'h',
            gpus: [],
            cpuSlots: 1,
            runtime: 'simulated',
            version: 't',
            runningAttempts: [],
          },
        };
  const { head } = await bus.store.append({
    aggregate,
    aggregateId: id,
    head: EMPTY_HEAD,
    events: [event],
    meta: testMeta(),
  } as Parameters<EventStore['append']>[0]);
  return head.seq;
}

/** Counts the readers made on the log. */
class CountingStore extends EventStore {
  readers: { fromSeq: number; filter?: string }[] = [];
  override reader(opts: Parameters<EventStore['reader']>[0]): Promise<ConsumerMessages> {
    this.readers.push({ fromSeq: opts.fromSeq, ...(opts.filter && { filter: opts.filter }) });
    return super.reader(opts);
  }
}

/** The log as a server whose count stayed off after a failover serves it: one too many waiting. */
class MiscountingStore extends EventStore {
  override async reader(opts: Parameters<EventStore['reader']>[0]): Promise<ConsumerMessages> {
    const real = await super.reader(opts);
    return {
      stop: () => real.stop(),
      async *[Symbol.asyncIterator]() {
        for await (const m of real as AsyncIterable<JsMsg>) {
          yield { seq: m.seq, string: () => m.string(), info: { pending: m.info.pending + 1 } };
        }
      },
    } as unknown as ConsumerMessages;
  }
}

const seqs = (events: StoredEvent[]) => events.map((e) => e.seq);

describe('subject filters', () => {
  it('match as NATS matches them', () => {
    expect(subjectMatches('ty.ev.job.*', 'ty.ev.job.j1')).toBe(true);
    expect(subjectMatches('ty.ev.job.*', 'ty.ev.worker.w1')).toBe(false);
    expect(subjectMatches('ty.ev.job.*', 'ty.ev.job.j1.x')).toBe(false);
    expect(subjectMatches('ty.ev.>', 'ty.ev.job.j1')).toBe(true);
    expect(subjectMatches('ty.ev.>', 'ty.ev')).toBe(false);
    expect(subjectMatches('ty.ev.job.j1', 'ty.ev.job.j1')).toBe(true);
  });
});

describe('one reader of the log shared by the services of a process', () => {
  it('serves each follower from its own position and filter with one reader', async () => {
    const base = await bus.store.lastSeq();
    const j1 = await append('job', 'sj1');
    const w1 = await append('worker', 'sw1');
    const j2 = await append('job', 'sj2');
    const store = new CountingStore(bus.js, bus.jsm);
    const shared = new SharedLog(store);
    const stop = new AbortController();
    const all: StoredEvent[] = [];
    const jobs: StoredEvent[] = [];
    const following = [
      shared.follow({ fromSeq: base + 1, signal: stop.signal }, (e) => void all.push(e)),
      shared.follow(
        { fromSeq: w1, filter: 'ty.ev.job.*', signal: stop.signal },
        (e) => void jobs.push(e),
      ),
    ];
    await waitFor('both read', () => all.length === 3 && jobs.length === 1);
    const j3 = await append('job', 'sj3');
    await waitFor('the new event', () => all.length === 4 && jobs.length === 2);
    expect(seqs(all)).toEqual([j1, w1, j2, j3]);
    expect(seqs(jobs)).toEqual([j2, j3]);
    expect(store.readers).toEqual([{ fromSeq: base + 1 }]);
    stop.abort();
    await Promise.all(following);
  });

  it('reads alone for a follower behind it until it reaches the shared reader, then shares it', async () => {
    const first = await append('job', 'rj1');
    const second = await append('job', 'rj2');
    const store = new CountingStore(bus.js, bus.jsm);
    const shared = new SharedLog(store);
    const stop = new AbortController();
    const ahead: StoredEvent[] = [];
    const behind: StoredEvent[] = [];
    let aheadCaughtUp = 0;
    let behindCaughtUp = 0;
    const following = [
      shared.follow(
        { fromSeq: second, signal: stop.signal, onCaughtUp: () => aheadCaughtUp++ },
        (e) => void ahead.push(e),
      ),
    ];
    await waitFor('the first follower caught up', () => aheadCaughtUp > 0);
    following.push(
      shared.follow(
        { fromSeq: first, signal: stop.signal, onCaughtUp: () => behindCaughtUp++ },
        (e) => void behind.push(e),
      ),
    );
    await waitFor('the second follower caught up', () => behindCaughtUp > 0);
    expect(seqs(behind)).toEqual([first, second]);
    const third = await append('job', 'rj3');
    const fourth = await append('job', 'rj4');
    await waitFor('both read the next', () => ahead.length === 3 && behind.length === 4);
    expect(seqs(ahead)).toEqual([second, third, fourth]);
    expect(seqs(behind)).toEqual([first, second, third, fourth]);
    expect(store.readers.map((r) => r.fromSeq)).toEqual([second, first]);
    stop.abort();
    await Promise.all(following);
  });

  it('lets a slow follower fall behind, alone, holding no more than its backlog, while the others go on', async () => {
    const from = (await bus.store.lastSeq()) + 1;
    const store = new CountingStore(bus.js, bus.jsm);
    const shared = new SharedLog(store, { backlog: 3 });
    const stop = new AbortController();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const fast: number[] = [];
    const slow: number[] = [];
    let slowCaughtUp = 0;
    const following = [
      shared.follow({ fromSeq: from, signal: stop.signal }, (e) => void fast.push(e.seq)),
      shared.follow(
        { fromSeq: from, signal: stop.signal, onCaughtUp: () => slowCaughtUp++ },
        async (e) => {
          slow.push(e.seq);
          await gate;
        },
      ),
    ];
    await waitFor('told it is at the end of the log', () => slowCaughtUp === 1);
    const written: number[] = [];
    for (let i = 0; i < 8; i++) written.push(await append('job', `gj${i}`));
    await waitFor('the fast follower read all', () => fast.length === 8);
    await waitFor('the slow one reading alone', () => store.readers.length === 2);
    expect(store.readers.map((r) => r.fromSeq)).toEqual([from, written[1]]);
    expect(slow).toEqual([written[0]]);
    expect(slowCaughtUp).toBe(1);
    release();
    await waitFor('the slow follower caught up', () => slowCaughtUp > 1);
    expect(slow).toEqual(written);
    expect(fast).toEqual(written);
    const last = await append('job', 'gj-last');
    await waitFor('both read the last', () => slow.length === 9 && fast.length === 9);
    expect(slow.at(-1)).toBe(last);
    expect(store.readers.length).toBe(2);
    stop.abort();
    await Promise.all(following);
  });

  it('tells a follower that starts at the end of the log that it has caught up', async () => {
    const shared = new SharedLog(bus.store);
    const stop = new AbortController();
    let caughtUp = 0;
    const following = shared.follow(
      {
        fromSeq: (await bus.store.lastSeq()) + 1,
        signal: stop.signal,
        onCaughtUp: () => caughtUp++,
      },
      () => undefined,
    );
    await waitFor('told it caught up', () => caughtUp === 1);
    stop.abort();
    await following;
  });

  it('tells a follower behind it, whose filter nothing in the log passes, that it has caught up', async () => {
    await append('job', 'nj1');
    const store = new CountingStore(bus.js, bus.jsm);
    const shared = new SharedLog(store);
    const stop = new AbortController();
    let aheadCaughtUp = 0;
    let behindCaughtUp = 0;
    const behind: StoredEvent[] = [];
    const following = [
      shared.follow(
        {
          fromSeq: (await bus.store.lastSeq()) + 1,
          signal: stop.signal,
          onCaughtUp: () => aheadCaughtUp++,
        },
        () => undefined,
      ),
    ];
    await waitFor('the first follower caught up', () => aheadCaughtUp > 0);
    following.push(
      shared.follow(
        {
          fromSeq: 1,
          filter: 'ty.ev.session.>',
          signal: stop.signal,
          onCaughtUp: () => behindCaughtUp++,
        },
        (e) => void behind.push(e),
      ),
    );
    await waitFor('the follower behind caught up', () => behindCaughtUp > 0);
    expect(behind).toEqual([]);
    expect(store.readers.map((r) => r.filter)).toEqual([undefined, 'ty.ev.session.>']);
    stop.abort();
    await Promise.all(following);
  });

  it('gives followers of other filters each of their events once while they join under load', async () => {
    const from = (await bus.store.lastSeq()) + 1;
    const written: { seq: number; aggregate: 'job' | 'worker' }[] = [];
    const write = async (n: number, tag: string) => {
      for (let i = 0; i < n; i++) {
        const aggregate = i % 2 === 0 ? 'job' : 'worker';
        written.push({ seq: await append(aggregate, `${tag}${i}`), aggregate });
      }
    };
    await write(60, 'la');
    const shared = new SharedLog(bus.store, { backlog: 8 });
    const stop = new AbortController();
    const jobs: number[] = [];
    const workers: number[] = [];
    const all: number[] = [];
    let jobsCaughtUp = 0;
    const following = [
      shared.follow(
        {
          fromSeq: from,
          filter: 'ty.ev.job.*',
          maxMessages: 16,
          signal: stop.signal,
          onCaughtUp: () => jobsCaughtUp++,
        },
        (e) => void jobs.push(e.seq),
      ),
    ];
    await waitFor('the job follower caught up', () => jobsCaughtUp > 0);
    const more = write(60, 'lb');
    following.push(
      shared.follow(
        { fromSeq: from, filter: 'ty.ev.worker.*', maxMessages: 16, signal: stop.signal },
        async (e) => {
          workers.push(e.seq);
          if (workers.length % 5 === 0) await new Promise((r) => setTimeout(r, 5));
        },
      ),
      shared.follow(
        { fromSeq: from, maxMessages: 16, signal: stop.signal },
        (e) => void all.push(e.seq),
      ),
    );
    await more;
    const of = (a: string) => written.filter((w) => w.aggregate === a).map((w) => w.seq);
    await waitFor(
      'every follower read everything',
      () => workers.length >= 60 && jobs.length >= 60 && all.length >= 120,
    );
    await new Promise((r) => setTimeout(r, 100));
    expect(jobs).toEqual(of('job'));
    expect(workers).toEqual(of('worker'));
    expect(all).toEqual(written.map((w) => w.seq));
    stop.abort();
    await Promise.all(following);
  });

  it('calls no handler of a follow that has ended, whether it rode, read alone or was handling', async () => {
    const from = (await bus.store.lastSeq()) + 1;
    for (let i = 0; i < 12; i++) await append('job', `za${i}`);
    const shared = new SharedLog(bus.store, { backlog: 3 });
    const riding = new AbortController();
    const alone = new AbortController();
    const busy = new AbortController();
    const calls = { riding: 0, alone: 0, busy: 0 };
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    let ridingCaughtUp = 0;
    const rider = shared.follow(
      { fromSeq: from, signal: riding.signal, onCaughtUp: () => ridingCaughtUp++ },
      () => void calls.riding++,
    );
    await waitFor('the rider caught up', () => ridingCaughtUp > 0);
    const behind = shared.follow({ fromSeq: from, maxMessages: 4, signal: alone.signal }, () => {
      calls.alone++;
      if (calls.alone === 2) alone.abort();
    });
    const handling = shared.follow({ fromSeq: from + 11, signal: busy.signal }, async () => {
      calls.busy++;
      await gate;
    });
    await behind;
    expect(calls.alone).toBe(2);
    await waitFor('the busy follower handling', () => calls.busy === 1);
    busy.abort();
    for (let i = 0; i < 6; i++) await append('job', `zb${i}`);
    await waitFor('the rider read on', () => calls.riding === 18);
    release();
    await handling;
    riding.abort();
    await rider;
    for (let i = 0; i < 3; i++) await append('job', `zc${i}`);
    await new Promise((r) => setTimeout(r, 200));
    expect(calls).toEqual({ riding: 18, alone: 2, busy: 1 });
  });

  it("ends only the follow whose handler failed, with that handler's error", async () => {
    const from = (await bus.store.lastSeq()) + 1;
    const shared = new SharedLog(bus.store);
    const stop = new AbortController();
    const healthy: number[] = [];
    const failing = shared.follow({ fromSeq: from, signal: stop.signal }, () => {
      throw new Error('cannot fold');
    });
    const following = shared.follow(
      { fromSeq: from, signal: stop.signal },
      (e) => void healthy.push(e.seq),
    );
    const first = await append('job', 'ej1');
    await expect(failing).rejects.toThrow('cannot fold');
    const second = await append('job', 'ej2');
    await waitFor('the healthy follower read on', () => healthy.length === 2);
    expect(healthy).toEqual([first, second]);
    stop.abort();
    await following;
  });

  it('returns every follow, each told its own position, when the reader miscounted', async () => {
    const first = await append('job', 'mj1');
    const second = await append('worker', 'mw1');
    const shared = new SharedLog(new MiscountingStore(bus.js, bus.jsm));
    const signal = new AbortController().signal;
    const told: Record<string, number> = {};
    await Promise.all([
      shared.follow(
        { fromSeq: first, signal, quietMs: 50, onMiscount: (at) => (told.all = at) },
        () => undefined,
      ),
      shared.follow(
        {
          fromSeq: first,
          filter: 'ty.ev.job.*',
          signal,
          quietMs: 50,
          onMiscount: (at) => (told.jobs = at),
        },
        () => undefined,
      ),
    ]);
    expect(told).toEqual({ all: second, jobs: second });
  });
});
