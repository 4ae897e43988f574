import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { EMPTY_HEAD, Subjects } from '@trainyard/events';
import { connectBus, type Bus } from '@trainyard/service-kit';
import { startTestNats, waitFor } from '@trainyard/testkit';
import { teamRole, teamToCharge } from '../src/charge.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'api-charge');
});
afterAll(async () => {
  await bus?.close();
  await nats?.stop();
});

/** Events of other aggregates: the stream takes them as they are, and team reads pass them. */
async function otherEvents(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await bus.js.publish(Subjects.event('job', `job_other${i}`), '{}');
}

const MINUTE = 60_000;

/** Runs `fn` with the clock `ms` ahead (`Date` alone: timers run as they do). */
async function later<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  const now = Date.now();
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(now + ms);
  try {
    return await fn();
  } finally {
    vi.useRealTimers();
  }
}

const addMember = (team: string, username: string, head = EMPTY_HEAD) =>
  bus.store.append({
    aggregate: 'team',
    aggregateId: team,
    head,
    events: [{ type: 'TeamMemberAdded', data: { username, role: 'member' } }],
    meta: { now: new Date(), actor: { kind: 'user', id: 'admin' } },
  });

describe('the team a submission is charged to', () => {
  it('reads only what the log gained since its last look, and still sees every new team event', async () => {
    const looks: number[] = [];
    const nextAfter = bus.store.nextAfter.bind(bus.store);
    bus.store.nextAfter = (seq, filter) => {
      looks.push(seq);
      return nextAfter(seq, filter);
    };
    const deps = { bus };

    await otherEvents(20);
    expect(await teamToCharge(deps, 'alice', undefined)).toBeUndefined();
    expect(looks).toEqual([0]);

    await otherEvents(5);
    looks.length = 0;
    expect(await teamToCharge(deps, 'alice', undefined)).toBeUndefined();
    expect(looks).toEqual([20]);

    const added = await addMember('vision', 'alice');
    await otherEvents(3);
    looks.length = 0;
    expect(await teamToCharge(deps, 'alice', undefined)).toBe('vision');
    expect(looks).toEqual([25, added.head.seq]);
    expect(await teamRole(deps, 'alice', 'vision')).toBe('member');

    await addMember('speech', 'alice');
    expect(await teamToCharge(deps, 'alice', 'speech')).toBe('speech');
    await expect(teamToCharge(deps, 'alice', 'robotics')).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    // The first team joined is charged when a spec names none.
    expect(await teamToCharge(deps, 'alice', undefined)).toBe('vision');
    expect(await teamToCharge(deps, 'bob', undefined)).toBeUndefined();
  });

  it('makes one request of the log a submission after this process appended, and still sees a team event appended elsewhere', async () => {
    const deps = { bus };
    await teamToCharge(deps, 'erin', undefined);
    const asked: string[] = [];
    const { lastSeq, nextAfter } = bus.store;
    bus.store.lastSeq = () => {
      asked.push('lastSeq');
      return lastSeq.call(bus.store);
    };
    bus.store.nextAfter = (seq, filter) => {
      asked.push(`nextAfter ${seq}`);
      return nextAfter.call(bus.store, seq, filter);
    };
    try {
      const job = await bus.store.append({
        aggregate: 'job',
        aggregateId: 'job_charged',
        head: EMPTY_HEAD,
        events: [{ type: 'JobCancelled', data: {} }],
        meta: { now: new Date(), actor: { kind: 'user', id: 'erin' } },
      });
      expect(bus.store.storedSeq).toBe(job.head.seq);
      expect(await teamToCharge(deps, 'erin', undefined)).toBeUndefined();
      expect(asked).toEqual([expect.stringMatching(/^nextAfter /)]);

      // Another process adds erin to a team: this one has appended nothing since, so it asks.
      const other = await connectBus(nats.url, 'api-charge-other');
      try {
        await other.store.append({
          aggregate: 'team',
          aggregateId: 'graphics',
          head: EMPTY_HEAD,
          events: [{ type: 'TeamMemberAdded', data: { username: 'erin', role: 'member' } }],
          meta: { now: new Date(), actor: { kind: 'user', id: 'admin' } },
        });
      } finally {
        await other.close();
      }
      asked.length = 0;
      expect(await teamToCharge(deps, 'erin', undefined)).toBe('graphics');
      expect(asked[0]).toBe('lastSeq');
    } finally {
      bus.store.lastSeq = lastSeq;
      bus.store.nextAfter = nextAfter;
    }
  });

  it('sees a team event appended while a look that found nothing was under way', async () => {
    const nextAfter = bus.store.nextAfter.bind(bus.store);
    let joined: Promise<unknown> | undefined;
    bus.store.nextAfter = async (seq, filter) => {
      const found = await nextAfter(seq, filter);
      if (!found && !joined) joined = addMember('robotics', 'carol');
      return found;
    };
    try {
      expect(await teamToCharge({ bus }, 'carol', undefined)).toBeUndefined();
      await joined;
      expect(await teamToCharge({ bus }, 'carol', undefined)).toBe('robotics');
    } finally {
      bus.store.nextAfter = nextAfter;
    }
  });

  it('folds the log again from its start after a while, so a look that missed an event heals', async () => {
    const nextAfter = bus.store.nextAfter.bind(bus.store);
    await addMember('audio', 'dave');
    // A server that has not yet stored dave's joining answers one look.
    bus.store.nextAfter = () => Promise.resolve(null);
    try {
      expect(await teamToCharge({ bus }, 'dave', undefined)).toBeUndefined();
    } finally {
      bus.store.nextAfter = nextAfter;
    }
    await otherEvents(2);
    expect(await teamToCharge({ bus }, 'dave', undefined)).toBeUndefined();

    // The first look 5 minutes on starts a new index; the old one answers it.
    expect(await later(6 * MINUTE, () => teamToCharge({ bus }, 'dave', undefined))).toBeUndefined();
    await waitFor('the index folded again to see dave', async () =>
      (await teamToCharge({ bus }, 'dave', undefined)) === 'audio' ? true : undefined,
    );
    expect(await teamRole({ bus }, 'dave', 'audio')).toBe('member');

    // The new index serves 5 minutes from when it was folded: one look a call, no new walk (a
    // walk reads the log's last sequence before the call returns, then looks from its start).
    const lastSeq = bus.store.lastSeq.bind(bus.store);
    const reads: string[] = [];
    bus.store.lastSeq = () => {
      reads.push('end');
      return lastSeq();
    };
    bus.store.nextAfter = (seq, filter) => {
      reads.push(`after ${seq}`);
      return nextAfter(seq, filter);
    };
    try {
      await later(7 * MINUTE, () => teamToCharge({ bus }, 'dave', undefined));
    } finally {
      bus.store.nextAfter = nextAfter;
      bus.store.lastSeq = lastSeq;
    }
    expect(reads).toHaveLength(2);
    expect(reads[0]).toBe('end');
    expect(reads[1]).not.toBe('after 0');
  });

  it('keeps the index it has when a new one folds less of the log', async () => {
    const nextAfter = bus.store.nextAfter.bind(bus.store);
    // A server not yet caught up answers the new index's first look, from the log's start.
    let missed = 0;
    bus.store.nextAfter = (seq, filter) => {
      if (seq > 0) return nextAfter(seq, filter);
      missed++;
      return Promise.resolve(null);
    };
    try {
      expect(await later(20 * MINUTE, () => teamToCharge({ bus }, 'alice', undefined))).toBe(
        'vision',
      );
      await waitFor('the new index to be folded', () => (missed > 0 ? true : undefined));
      // Its look answered, the rest of its fold is in this turn: the next one sees its outcome.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      bus.store.nextAfter = nextAfter;
    }
    expect(await teamToCharge({ bus }, 'alice', undefined)).toBe('vision');
    expect(await teamRole({ bus }, 'dave', 'audio')).toBe('member');
  });
});
