import { describe, expect, it } from 'vitest';
import type { WorkerEvent } from '@trainyard/events';
import {
  decideWorker,
  evolveWorker,
  initialWorker,
  type WorkerCommand,
  type WorkerLifecycle,
} from '../src/index.ts';

const registration = {
  name: 'w1',
  hostname: 'gpu-host',
  gpus: [{ index: 0, name: 'H100', uuid: 'GPU-1', vramBytes: 80 * 2 ** 30, simulated: false }],
  cpuSlots: 4,
  runtime: 'process',
  version: '0.1.0',
  runningAttempts: [],
};
const registered: WorkerEvent = { type: 'WorkerRegistered', data: registration };
const left: WorkerEvent = { type: 'WorkerLeft', data: { reason: 'stopped' } };
const lost: WorkerEvent = {
  type: 'WorkerLost',
  data: { lastSeenAt: '2026-01-01T00:00:00.000Z', timeoutMs: 30_000 },
};
const revoked: WorkerEvent = {
  type: 'WorkerLost',
  data: { lastSeenAt: null, timeoutMs: 0, revoked: true },
};

const given = (events: WorkerEvent[]): WorkerLifecycle =>
  events.reduce(evolveWorker, initialWorker);
const when = (events: WorkerEvent[], command: WorkerCommand) =>
  decideWorker(command, given(events));

const markLost: WorkerCommand = {
  type: 'MarkWorkerLost',
  lastSeenAt: '2026-01-01T00:00:00.000Z',
  timeoutMs: 30_000,
};

describe('worker decider', () => {
  it('registers a new worker, and one that comes back after any end', () => {
    for (const history of [[], [registered], [registered, left], [registered, lost], [revoked]]) {
      const events = when(history, { type: 'RegisterWorker', registration });
      expect(events).toEqual([registered]);
      expect(given([...history, ...events]).status).toBe('online');
    }
  });

  it('lets an online worker leave, once', () => {
    expect(when([registered], { type: 'LeaveCluster', reason: 'stopped' })).toEqual([left]);
    expect(given([registered, left]).status).toBe('offline');
    expect(when([registered, left], { type: 'LeaveCluster', reason: 'stopped' })).toEqual([]);
    expect(when([], { type: 'LeaveCluster', reason: 'stopped' })).toEqual([]);
  });

  it('marks only an online worker lost: not one that left, and not twice', () => {
    expect(when([registered], markLost)).toEqual([lost]);
    expect(given([registered, lost]).status).toBe('lost');
    expect(when([registered, left], markLost)).toEqual([]);
    expect(when([registered, lost], markLost)).toEqual([]);
    expect(when([], markLost)).toEqual([]);
  });

  it('revokes an online worker as lost and revoked, and records nothing for one already gone', () => {
    expect(when([registered], { type: 'RevokeWorker' })).toEqual([revoked]);
    expect(given([registered, revoked]).status).toBe('revoked');
    expect(when([registered, lost], { type: 'RevokeWorker' })).toEqual([]);
    expect(when([], { type: 'RevokeWorker' })).toEqual([]);
  });

  it('takes a worker’s state from its last event alone', () => {
    const histories: WorkerEvent[][] = [
      [registered, lost, registered],
      [registered, left, registered, revoked],
      [revoked, registered, left],
    ];
    for (const history of histories) {
      expect(given(history)).toEqual(evolveWorker(initialWorker, history[history.length - 1]!));
    }
  });
});
