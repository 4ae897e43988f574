import type { Insertable, Selectable } from 'kysely';
import type { Failure } from '@trainyard/events';

export interface AttemptsTable {
  id: string;
  job_id: string;
  number: number;
  worker_id: string;
  gpus: number[];
  vram_bytes: number;
  /** The attempt was the job's probe. */
  probe: boolean;
  status: string;
  exit_code: number | null;
  failure: Failure | null;
  assigned_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}
export type AttemptRow = Selectable<AttemptsTable>;
export type NewAttemptRow = Insertable<AttemptsTable>;
