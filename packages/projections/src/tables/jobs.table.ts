import type { Insertable, Selectable } from 'kysely';
import type { Estimate, Failure, HealthCheck, OutputFile, Resources } from '@trainyard/events';

export interface JobsTable {
  id: string;
  name: string;
  owner: string;
  /** The team its GPUs are charged to, if any. */
  team: string | null;
  status: string;
  priority: number;
  command: string;
  image: string | null;
  /** The digest of the image built for the job, once built. */
  image_digest: string | null;
  resources: Resources;
  /** Whether a probe measures the job before it is placed. */
  estimates: boolean;
  /** What the probe measured, once it has. */
  estimate: Estimate | null;
  max_retries: number;
  /** Seconds an attempt may run, when the job declares a limit. */
  time_limit: number | null;
  /** A waiting job of a higher priority may stop its running attempt. */
  preemptible: boolean;
  /** How many shards an array job has; null for any other job. */
  shards: number | null;
  /** How many workers a gang job spans at once; null for any other job. */
  nodes: number | null;
  /** `job`, or a `service` that runs until stopped; and a service's health check. */
  kind: string;
  health: HealthCheck | null;
  /** For a shard, its array job and its index in it. */
  shard_of: string | null;
  shard_index: number | null;
  /** The jobs that must succeed before it is placed. */
  depends_on: string[];
  /** Every one of them has succeeded (true for a job without any). */
  dependencies_met: boolean;
  /** Who holds it while it is held (`owner` or `admin`), and why. */
  held_by: string | null;
  hold_reason: string | null;
  env_names: string[];
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
  exit_code: number | null;
  failure: Failure | null;
  retry_at: Date | null;
  attempt_count: number;
  outputs: OutputFile[];
  /** The attempt that reported `outputs`: its worker keeps the files. */
  outputs_attempt_id: string | null;
  last_seq: number;
}
export type JobRow = Selectable<JobsTable>;
export type NewJobRow = Insertable<JobsTable>;
