import type { Insertable, Selectable } from 'kysely';
import type { Failure, Resources, SessionTimers } from '@trainyard/events';

export interface SessionsTable {
  id: string;
  owner: string;
  /** The team its GPUs are charged to, if any. */
  team: string | null;
  name: string | null;
  status: string;
  resources: Resources;
  /** The timers in force, as decided when the session was requested. */
  timers: SessionTimers;
  /** The job whose image it runs in, or the base its own image is built on (in a container). */
  from_job: string | null;
  base_image: string | null;
  image_digest: string | null;
  /** The worker and run that hold the session now; null while it waits for a place. */
  worker_id: string | null;
  run_id: string | null;
  /** How many times it was placed. */
  runs: number;
  /** The GPUs of the current run. */
  gpus: number[];
  /** Whether a channel is open, as the gateway last said. */
  active: boolean;
  /** When the last channel closed (or the run started, before any opened). */
  idle_since: Date | null;
  stop_reason: string | null;
  failure: Failure | null;
  /** Why it waits for a place again, until it runs again. */
  requeued_because: string | null;
  requested_at: Date;
  /** When the current run started running. */
  started_at: Date | null;
  /** When someone first logged in to the current run. */
  connected_at: Date | null;
  last_login_at: Date | null;
  ended_at: Date | null;
  last_seq: number;
}
export type SessionRow = Selectable<SessionsTable>;
export type NewSessionRow = Insertable<SessionsTable>;
