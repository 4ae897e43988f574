import { describe, expect, it } from 'vitest';
import type { SessionEvent, StoredEvent, UserEvent } from '@trainyard/events';
import { storedEvent } from '@trainyard/testkit';
import { sessionsProjector, sshKeysProjector } from '../src/index.ts';

const T0 = new Date('2026-03-01T10:00:00Z');
const at = (min: number) => new Date(T0.getTime() + min * 60_000);

function sessionEvents(events: [number, SessionEvent][]): StoredEvent[] {
  return events.map(([min, e], i) =>
    storedEvent('session', 'ses_1', e, { seq: i + 1, at: at(min) }),
  );
}

/** Applies events to a row as the writer does: `undefined` leaves it, `null` deletes it. */
function fold<R>(
  apply: (row: R | undefined, e: StoredEvent) => R | null | undefined,
  events: StoredEvent[],
): R | undefined {
  let row: R | undefined;
  for (const e of events) {
    const next = apply(row, e);
    if (next !== undefined) row = next ?? undefined;
  }
  return row;
}

const requested: SessionEvent = {
  type: 'SessionRequested',
  data: {
    owner: 'alice',
    spec: { name: 'nb', resources: { gpus: 1 }, timers: {} },
    timers: { connectMin: 10, idleMin: 30, maxMin: 360 },
  },
};
const assigned = (runId: string, run: number): SessionEvent => ({
  type: 'SessionAssigned',
  data: { runId, run, workerId: `w${run}`, gpus: [run], vramBytes: 0, cpus: 0 },
});
const login: SessionEvent = {
  type: 'SessionLogin',
  data: { user: 'alice', method: 'password', accepted: true, source: '127.0.0.1' },
};

describe('the sessions projector', () => {
  it('follows a session through a lost run, a second run, its logins and its stop', () => {
    const row = fold(
      sessionsProjector.apply,
      sessionEvents([
        [0, requested],
        [1, assigned('r1', 1)],
        [2, { type: 'SessionStarted', data: { runId: 'r1' } }],
        [3, { type: 'SessionRequeued', data: { runId: 'r1', reason: 'worker w1 was lost' } }],
        [4, assigned('r2', 2)],
        [5, { type: 'SessionStarted', data: { runId: 'r2' } }],
        [6, login],
        [7, { type: 'SessionActivity', data: { runId: 'r2', active: true } }],
        [8, { ...login, data: { ...login.data, accepted: false, user: 'bob' } }],
        [9, { type: 'SessionActivity', data: { runId: 'r1', active: false } }],
      ]),
    )!;
    expect(row).toMatchObject({
      id: 'ses_1',
      owner: 'alice',
      name: 'nb',
      status: 'running',
      worker_id: 'w2',
      run_id: 'r2',
      runs: 2,
      gpus: [2],
      active: true,
      idle_since: null,
      requeued_because: null,
      started_at: at(5),
      connected_at: at(6),
      last_login_at: at(6),
      last_seq: 10,
    });

    const ended = fold(
      sessionsProjector.apply,
      sessionEvents([
        [0, requested],
        [1, assigned('r1', 1)],
        [2, { type: 'SessionStarted', data: { runId: 'r1' } }],
        [
          3,
          { type: 'SessionStopRequested', data: { reason: 'idle', runId: 'r1', workerId: 'w1' } },
        ],
        [4, { type: 'SessionStopped', data: { runId: 'r1' } }],
      ]),
    )!;
    expect(ended).toMatchObject({
      status: 'stopped',
      stop_reason: 'idle',
      worker_id: null,
      gpus: [],
      ended_at: at(4),
    });
  });

  it('keeps a session stopping when its run starts after the stop was asked', () => {
    const row = fold(
      sessionsProjector.apply,
      sessionEvents([
        [0, requested],
        [1, assigned('r1', 1)],
        [
          2,
          { type: 'SessionStopRequested', data: { reason: 'user', runId: 'r1', workerId: 'w1' } },
        ],
        [3, { type: 'SessionStarted', data: { runId: 'r1' } }],
      ]),
    )!;
    expect(row.status).toBe('stopping');
  });
});

describe('the SSH keys projector', () => {
  const fp = `SHA256:${'a'.repeat(43)}`;
  const added: UserEvent = {
    type: 'UserSshKeyAdded',
    data: { fingerprint: fp, publicKey: 'ssh-ed25519 AAAA', name: 'laptop' },
  };
  const removed: UserEvent = { type: 'UserSshKeyRemoved', data: { fingerprint: fp } };
  const ev = (user: string, e: UserEvent, seq: number) =>
    storedEvent('user', user, e, { seq, at: at(seq) });

  it('gives a key to the first user who added it; another user’s removal leaves it be', () => {
    const row = fold(sshKeysProjector.apply, [
      ev('alice', added, 1),
      ev('bob', added, 2),
      ev('bob', removed, 3),
    ]);
    expect(row).toEqual({
      fingerprint: fp,
      username: 'alice',
      public_key: 'ssh-ed25519 AAAA',
      name: 'laptop',
      added_at: at(1),
    });
    expect(sshKeysProjector.apply(row, ev('alice', removed, 4))).toBeNull();
    expect(sshKeysProjector.keyOf(ev('alice', added, 5))).toBe(fp);
    expect(
      sshKeysProjector.keyOf(ev('alice', { type: 'UserPasswordChanged', data: {} }, 6)),
    ).toBeNull();
  });
});
