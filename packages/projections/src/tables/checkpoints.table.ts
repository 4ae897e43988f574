import type { Selectable } from 'kysely';

/** How far each projector has applied the log: the last stream sequence committed. */
export interface CheckpointsTable {
  name: string;
  seq: number;
}
export type CheckpointRow = Selectable<CheckpointsTable>;
