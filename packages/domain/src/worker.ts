/**
 * The worker aggregate: a daemon on one host registers its inventory, leaves when it stops, and
 * is lost when it falls silent or its key is revoked. Its liveness rides the heartbeat stream;
 * only these transitions are events. The watchdog, the API, the scheduler's cluster fold and the
 * workers projection all read a worker's state through `evolveWorker`.
 */
import type { WorkerEvent } from '@trainyard/events';
import { assertNever } from './errors.ts';

type Registration = Extract<WorkerEvent, { type: 'WorkerRegistered' }>['data'];

/**
 * `unregistered` before its first registration; `online` from a registration until it leaves
 * (`offline`), falls silent (`lost`) or is cut off (`revoked`); a registration brings it back.
 */
export type WorkerStatus = 'unregistered' | 'online' | 'offline' | 'lost' | 'revoked';

/** All a decision needs. It follows from the worker's last event alone. */
export interface WorkerLifecycle {
  status: WorkerStatus;
}

export const initialWorker: WorkerLifecycle = { status: 'unregistered' };

export type WorkerCommand =
  | { type: 'RegisterWorker'; registration: Registration }
  | { type: 'LeaveCluster'; reason: string }
  | { type: 'MarkWorkerLost'; lastSeenAt: string | null; timeoutMs: number }
  | { type: 'RevokeWorker' };

/** The state after `event`. */
export function evolveWorker(_state: WorkerLifecycle, event: WorkerEvent): WorkerLifecycle {
  switch (event.type) {
    case 'WorkerRegistered':
      return { status: 'online' };
    case 'WorkerLeft':
      return { status: 'offline' };
    case 'WorkerLost':
      return { status: event.data.revoked ? 'revoked' : 'lost' };
    default:
      return assertNever(event);
  }
}

/**
 * What a command records. A worker may register at any time (a restart registers again); it
 * leaves, is lost or is revoked only while online, so a repeat, or a loss racing its leaving,
 * records nothing.
 */
export function decideWorker(command: WorkerCommand, state: WorkerLifecycle): WorkerEvent[] {
  switch (command.type) {
    case 'RegisterWorker':
      return [{ type: 'WorkerRegistered', data: command.registration }];
    case 'LeaveCluster':
      return state.status === 'online'
        ? [{ type: 'WorkerLeft', data: { reason: command.reason } }]
        : [];
    case 'MarkWorkerLost':
      return state.status === 'online'
        ? [
            {
              type: 'WorkerLost',
              data: { lastSeenAt: command.lastSeenAt, timeoutMs: command.timeoutMs },
            },
          ]
        : [];
    case 'RevokeWorker':
      return state.status === 'online'
        ? [{ type: 'WorkerLost', data: { lastSeenAt: null, timeoutMs: 0, revoked: true } }]
        : [];
    default:
      return assertNever(command);
  }
}
