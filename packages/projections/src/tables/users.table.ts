import type { Insertable, Selectable } from 'kysely';

export interface UsersTable {
  username: string;
  role: string;
  created_at: Date;
}
export type UserRow = Selectable<UsersTable>;
export type NewUserRow = Insertable<UsersTable>;
