import { sql, type Kysely } from 'kysely';
import type { Database } from './database.ts';
import type { AttemptRow } from './tables/attempts.table.ts';
import type { JobRow } from './tables/jobs.table.ts';

/** One job, or undefined. Owner checks belong to the caller. */
export function findJob(db: Kysely<Database>, id: string): Promise<JobRow | undefined> {
  return db.selectFrom('jobs').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The owner and status of each of `ids` the projection holds. */
export function jobOwnersAndStatuses(
  db: Kysely<Database>,
  ids: readonly string[],
): Promise<{ id: string; owner: string; status: string }[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return db.selectFrom('jobs').select(['id', 'owner', 'status']).where('id', 'in', ids).execute();
}

export interface JobListQuery {
  owner?: string;
  status?: string;
  /** Only jobs of this kind (`job`, `service`). */
  kind?: string;
  limit: number;
  /** Only jobs created before this one (keyset pagination, newest first). */
  before?: { createdAt: Date; id: string };
}

/** Jobs, newest first. */
export function listJobs(db: Kysely<Database>, q: JobListQuery): Promise<JobRow[]> {
  let query = db.selectFrom('jobs').selectAll();
  if (q.owner) query = query.where('owner', '=', q.owner);
  if (q.status) query = query.where('status', '=', q.status);
  if (q.kind) query = query.where('kind', '=', q.kind);
  if (q.before) {
    const { createdAt, id } = q.before;
    query = query.where((eb) =>
      eb.or([
        eb('created_at', '<', createdAt),
        eb.and([eb('created_at', '=', createdAt), eb('id', '<', id)]),
      ]),
    );
  }
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(q.limit).execute();
}

/** A job's attempts, first to last. */
export function listAttempts(db: Kysely<Database>, jobId: string): Promise<AttemptRow[]> {
  return db
    .selectFrom('attempts')
    .selectAll()
    .where('job_id', '=', jobId)
    .orderBy('number')
    .execute();
}

export function listWorkers(db: Kysely<Database>) {
  return db.selectFrom('workers').selectAll().orderBy('id').execute();
}

export function listUsers(db: Kysely<Database>) {
  return db.selectFrom('users').selectAll().orderBy('username').execute();
}

/** Every team, by name; or only those `member` is in. */
export function listTeams(db: Kysely<Database>, member?: string) {
  let q = db.selectFrom('teams').selectAll().orderBy('name');
  if (member !== undefined)
    q = q.where(sql<boolean>`members @> ${JSON.stringify([{ username: member }])}::text::jsonb`);
  return q.execute();
}

export function findTeam(db: Kysely<Database>, name: string) {
  return db.selectFrom('teams').selectAll().where('name', '=', name).executeTakeFirst();
}

/** Counts of jobs by status, for metrics. */
export async function countJobsByStatus(db: Kysely<Database>): Promise<Record<string, number>> {
  const rows = await db
    .selectFrom('jobs')
    .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
    .groupBy('status')
    .execute();
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

/** How many of an array job's shards stand in each status. */
export async function countShardsByStatus(
  db: Kysely<Database>,
  jobId: string,
): Promise<Record<string, number>> {
  const rows = await db
    .selectFrom('jobs')
    .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
    .where('shard_of', '=', jobId)
    .groupBy('status')
    .execute();
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

/** Every projected row, ordered, for comparing two databases. */
export async function snapshotProjections(db: Kysely<Database>) {
  return {
    jobs: await db.selectFrom('jobs').selectAll().orderBy('id').execute(),
    attempts: await db.selectFrom('attempts').selectAll().orderBy('id').execute(),
    workers: await db.selectFrom('workers').selectAll().orderBy('id').execute(),
    users: await db.selectFrom('users').selectAll().orderBy('username').execute(),
    sessions: await db.selectFrom('sessions').selectAll().orderBy('id').execute(),
    ssh_keys: await db.selectFrom('ssh_keys').selectAll().orderBy('fingerprint').execute(),
  };
}
