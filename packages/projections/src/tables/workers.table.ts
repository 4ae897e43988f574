import type { Insertable, Selectable } from 'kysely';
import type { Gpu } from '@trainyard/events';

export interface WorkersTable {
  id: string;
  hostname: string;
  status: string;
  gpus: Gpu[];
  cpu_slots: number;
  runtime: string;
  version: string;
  registered_at: Date;
  updated_at: Date;
}
export type WorkerRow = Selectable<WorkersTable>;
export type NewWorkerRow = Insertable<WorkersTable>;
