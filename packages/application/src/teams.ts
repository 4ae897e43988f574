import { retry, type AppendMeta, type EventStore, type TeamEvent } from '@trainyard/events';
import {
  decideTeam,
  evolveTeam,
  initialTeam,
  type TeamCommand,
  type TeamState,
} from '@trainyard/domain';
import { CONFLICTS } from './commands.ts';

/**
 * Runs a command against a team: read it from the log (a team has few events), decide, append
 * at its head, and on a conflict read and decide again, a bounded number of times. Domain
 * rejections propagate. Returns the team as it stands after.
 */
export async function runTeamCommand(
  store: EventStore,
  name: string,
  command: TeamCommand,
  meta: AppendMeta,
): Promise<TeamState> {
  return retry(async () => {
    const { events, head } = await store.load('team', name);
    const state = events.reduce((s, e) => evolveTeam(s, e), initialTeam(name));
    const decided: TeamEvent[] = decideTeam(command, state);
    if (decided.length === 0) return state;
    await store.append({ aggregate: 'team', aggregateId: name, head, events: decided, meta });
    return decided.reduce((s, e) => evolveTeam(s, e), state);
  }, CONFLICTS);
}
