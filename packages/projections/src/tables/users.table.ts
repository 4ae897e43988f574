import type { Insertable, Selectable } from 'kysely';

export interface UsersTable {
  username: string;
  role: string;
  created_at: Date;
  disabled_at: Date | null;
  /** The most GPUs the user's work may hold at once; null: no quota. */
  max_gpus: number | null;
  /** The GPU-hours a calendar month the user's work may take; null: no quota. */
  max_gpu_hours: number | null;
}
export type UserRow = Selectable<UsersTable>;
export type NewUserRow = Insertable<UsersTable>;
