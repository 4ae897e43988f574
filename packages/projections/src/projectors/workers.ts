import { evolveWorker, initialWorker, registeredCapacity } from '@trainyard/domain';
import { ofAggregate, type StoredEvent } from '@trainyard/events';
import type { WorkerRow } from '../tables/workers.table.ts';
import type { TableProjector } from './types.ts';

function step(row: WorkerRow | undefined, event: StoredEvent): WorkerRow | undefined {
  if (!ofAggregate(event, 'worker')) return undefined;
  const at = new Date(event.occurredAt);
  // A worker's status follows from its last event alone.
  const { status } = evolveWorker(initialWorker, event);
  switch (event.type) {
    case 'WorkerRegistered':
      return {
        id: event.aggregateId,
        hostname: event.data.hostname,
        status,
        gpus: event.data.gpus,
        cpu_slots: event.data.cpuSlots,
        capacity: registeredCapacity(event.data),
        runtime: event.data.runtime,
        version: event.data.version,
        registered_at: at,
        updated_at: at,
      };
    case 'WorkerLeft':
    case 'WorkerLost':
      return row && { ...row, status, updated_at: at };
    default: {
      const never: never = event;
      throw new Error(`unhandled worker event ${JSON.stringify(never)}`);
    }
  }
}

/** One row per worker, with its inventory. */
export const workersProjector: TableProjector<'workers'> = {
  table: 'workers',
  primaryKey: 'id',
  jsonColumns: ['gpus', 'capacity'],
  keyOf: (event) => (event.aggregate === 'worker' ? event.aggregateId : null),
  apply: step,
};
