import type { ProjectedTable } from '../database.ts';
import { attemptsProjector } from './attempts.ts';
import { jobsProjector } from './jobs.ts';
import { sessionsProjector } from './sessions.ts';
import { sshKeysProjector } from './ssh-keys.ts';
import { teamsProjector } from './teams.ts';
import type { TableProjector } from './types.ts';
import { usersProjector } from './users.ts';
import { workersProjector } from './workers.ts';

export type { Row, TableProjector } from './types.ts';

/** Every table projector, applied in this order to each batch. */
export const PROJECTORS: readonly TableProjector<ProjectedTable>[] = [
  jobsProjector,
  attemptsProjector,
  workersProjector,
  usersProjector,
  sessionsProjector,
  sshKeysProjector,
  teamsProjector,
] as unknown as readonly TableProjector<ProjectedTable>[];

export {
  attemptsProjector,
  jobsProjector,
  sessionsProjector,
  sshKeysProjector,
  teamsProjector,
  usersProjector,
  workersProjector,
};
