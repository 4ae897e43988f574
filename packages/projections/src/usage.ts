import { sql, type Kysely } from 'kysely';
import type { Database } from './database.ts';

export interface UsageWindow {
  from: Date;
  to: Date;
  /** Only this user's jobs. */
  owner?: string;
  /** The most jobs listed, those that used most first. */
  jobLimit: number;
}

export interface UserUsage {
  owner: string;
  gpuSeconds: number;
  jobs: number;
  attempts: number;
}

export interface JobUsage {
  jobId: string;
  name: string;
  owner: string;
  gpuSeconds: number;
  attempts: number;
}

/**
 * GPU time held within a window: each attempt holds its GPUs from its assignment to its end
 * (or now, while it runs), counted for the part of that which falls in the window, times the
 * number of its GPUs (on every worker, for a gang's). Summed per user and per job from the attempts and jobs read models.
 */
export async function gpuUsage(
  db: Kysely<Database>,
  w: UsageWindow,
): Promise<{ users: UserUsage[]; jobs: JobUsage[] }> {
  const held = sql<number>`sum(jsonb_array_length(a.gpus) * (1 + jsonb_array_length(a.members)) * greatest(0, extract(epoch from (least(coalesce(a.finished_at, now()), ${w.to}::timestamptz) - greatest(a.assigned_at, ${w.from}::timestamptz)))))::float8`;
  const base = db
    .selectFrom('attempts as a')
    .innerJoin('jobs as j', 'j.id', 'a.job_id')
    .where('a.assigned_at', '<', w.to)
    .where((eb) => eb.or([eb('a.finished_at', 'is', null), eb('a.finished_at', '>', w.from)]))
    .where(sql<number>`jsonb_array_length(a.gpus)`, '>', 0)
    .$if(w.owner !== undefined, (q) => q.where('j.owner', '=', w.owner!));
  const [users, jobs] = await Promise.all([
    base
      .select([
        'j.owner as owner',
        held.as('gpuSeconds'),
        sql<number>`count(distinct a.job_id)::int`.as('jobs'),
        sql<number>`count(*)::int`.as('attempts'),
      ])
      .groupBy('j.owner')
      .orderBy('gpuSeconds', 'desc')
      .execute(),
    base
      .select([
        'j.id as jobId',
        'j.name as name',
        'j.owner as owner',
        held.as('gpuSeconds'),
        sql<number>`count(*)::int`.as('attempts'),
      ])
      .groupBy(['j.id', 'j.name', 'j.owner'])
      .orderBy('gpuSeconds', 'desc')
      .limit(w.jobLimit)
      .execute(),
  ]);
  return { users, jobs };
}
