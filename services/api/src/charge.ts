import { Subjects } from '@trainyard/events';
import { listTeams, readCheckpoint } from '@trainyard/projections';
import type { ApiDeps } from './deps.ts';
import { ApiError } from './errors.ts';
import { readModel, waitForSeq } from './routes/common.ts';

/**
 * The teams (`member`'s, or all), from their projection once it holds every team event in the
 * log: a change to a team is seen by the next read, and a member just added is charged.
 */
export async function currentTeams(deps: ApiDeps, member?: string) {
  const checkpoint = await readModel(() => readCheckpoint(deps.db));
  if (await deps.bus.store.hasAfter(checkpoint, Subjects.aggregateEvents('team')))
    await waitForSeq(deps, await deps.bus.store.lastSeq());
  return readModel(() => listTeams(deps.db, member));
}

/**
 * The team a user's new job or session is charged to, decided once at submission: the one its
 * spec names (one of theirs), else the first team they joined, else none.
 */
export async function teamToCharge(
  deps: ApiDeps,
  username: string,
  named: string | undefined,
): Promise<string | undefined> {
  const teams = await currentTeams(deps, username);
  if (named !== undefined) {
    if (!teams.some((t) => t.name === named))
      throw new ApiError('VALIDATION_FAILED', `team: you are not in a team named ${named}`);
    return named;
  }
  let first: { team: string; since: string } | undefined;
  for (const t of teams) {
    const since = t.members.find((m) => m.username === username)?.since;
    if (since !== undefined && (first === undefined || since < first.since))
      first = { team: t.name, since };
  }
  return first?.team;
}
