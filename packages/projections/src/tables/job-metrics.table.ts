import type { ColumnType, Generated } from 'kysely';

/** One training metric point, as its worker read it (see `009_metrics`). */
export interface JobMetricsTable {
  job_id: string;
  attempt: number;
  worker_id: string;
  source: string;
  offset: ColumnType<string, number, never>;
  at: Date;
  step: number | null;
  epoch: number | null;
  values: ColumnType<Record<string, number>, string, never>;
  /** Its order of arrival, for reading on from where a reader left off. */
  seq: Generated<string>;
}
