import type { Insertable, Selectable } from 'kysely';
import type { WorkerCapacity } from '@trainyard/domain';
import type { Gpu } from '@trainyard/events';

export interface WorkersTable {
  id: string;
  hostname: string;
  status: string;
  gpus: Gpu[];
  cpu_slots: number;
  /** What placement reads of it beyond its GPUs and CPU slots (null: projected before it was). */
  capacity: WorkerCapacity | null;
  runtime: string;
  version: string;
  registered_at: Date;
  updated_at: Date;
}
export type WorkerRow = Selectable<WorkersTable>;
export type NewWorkerRow = Insertable<WorkersTable>;
