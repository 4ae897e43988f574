import type { Insertable, Selectable } from 'kysely';

export interface UsersTable {
  username: string;
  role: string;
  created_at: Date;
  disabled_at: Date | null;
}
export type UserRow = Selectable<UsersTable>;
export type NewUserRow = Insertable<UsersTable>;
