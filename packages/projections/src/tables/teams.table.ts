import type { Selectable } from 'kysely';

/** A member of a team, as the teams table keeps them: in the order they joined. */
export interface TeamMember {
  username: string;
  role: string;
  /** When they joined (a role change keeps it). */
  since: string;
}

export interface TeamsTable {
  name: string;
  created_at: Date;
  /** The most GPUs its members' work may hold at once; null: no quota. */
  max_gpus: number | null;
  /** The GPU-hours a calendar month its members' work may take; null: no quota. */
  max_gpu_hours: number | null;
  members: TeamMember[];
}
export type TeamRow = Selectable<TeamsTable>;
