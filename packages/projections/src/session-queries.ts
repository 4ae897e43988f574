import type { Kysely } from 'kysely';
import type { Database } from './database.ts';
import type { SessionRow } from './tables/sessions.table.ts';
import type { SshKeyRow } from './tables/ssh-keys.table.ts';

/** One session, or undefined. Owner checks belong to the caller. */
export function findSession(db: Kysely<Database>, id: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('id', '=', id).executeTakeFirst();
}

export interface SessionListQuery {
  owner?: string;
  status?: string;
  limit: number;
}

/** Sessions, newest first. */
export function listSessions(db: Kysely<Database>, q: SessionListQuery): Promise<SessionRow[]> {
  let query = db.selectFrom('sessions').selectAll();
  if (q.owner) query = query.where('owner', '=', q.owner);
  if (q.status) query = query.where('status', '=', q.status);
  return query.orderBy('requested_at', 'desc').orderBy('id', 'desc').limit(q.limit).execute();
}

/** A registered SSH key by fingerprint, whoever registered it. */
export function findSshKey(
  db: Kysely<Database>,
  fingerprint: string,
): Promise<SshKeyRow | undefined> {
  return db
    .selectFrom('ssh_keys')
    .selectAll()
    .where('fingerprint', '=', fingerprint)
    .executeTakeFirst();
}

/** A user's SSH keys, oldest first. */
export function listSshKeys(db: Kysely<Database>, username: string): Promise<SshKeyRow[]> {
  return db
    .selectFrom('ssh_keys')
    .selectAll()
    .where('username', '=', username)
    .orderBy('added_at')
    .orderBy('fingerprint')
    .execute();
}
