import type { Generated, Insertable, Selectable } from 'kysely';
import type { Failure, Placement } from '@trainyard/events';

export interface AttemptsTable {
  id: string;
  job_id: string;
  number: number;
  worker_id: string;
  gpus: number[];
  vram_bytes: number;
  /** The attempt was the job's probe. */
  probe: boolean;
  /** A gang job's members beyond rank 0 (`worker_id`, `gpus`): one per worker. */
  members: Generated<Placement[]>;
  /** A service's ports on its worker. */
  ports: Generated<number[]>;
  status: string;
  exit_code: number | null;
  failure: Failure | null;
  assigned_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}
export type AttemptRow = Selectable<AttemptsTable>;
export type NewAttemptRow = Insertable<AttemptsTable>;
