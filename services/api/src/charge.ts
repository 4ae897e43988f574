import {
  Subjects,
  type EventStore,
  type StoredEvent,
  type TeamEvent,
  type TeamRole,
} from '@trainyard/events';
import { listTeams } from '@trainyard/projections';
import type { ApiDeps } from './deps.ts';
import { ApiError } from './errors.ts';
import { readModel, waitForSeq } from './routes/common.ts';

const TEAM_EVENTS = Subjects.aggregateEvents('team');

/** A user's place in a team: their role, and the sequence of the event that added them. */
interface Membership {
  role: TeamRole;
  seq: number;
}

/**
 * Who is in which team, folded from the team events of the log, read on demand: one look at the
 * log when nothing changed, the new events when something did. Commands need not wait for the
 * read models, nor for PostgreSQL.
 */
class TeamIndex {
  /** The sequence of the last team event folded. */
  lastSeq = 0;
  /**
   * How far the log is known to hold no team event after `lastSeq`. Each look starts here, so it
   * reads only what was appended since the last one: the server walks what lies between.
   */
  #searchedTo = 0;
  /** Each user's teams, with their role and the sequence of the event that added them. */
  readonly #joined = new Map<string, Map<string, Membership>>();

  constructor(private readonly store: EventStore) {}

  async current(): Promise<this> {
    // Everything up to `end` is in the log before the look below starts, so a look that finds
    // nothing more has searched up to `end` at least. Where this process has appended since
    // the last look (each submission does), the store knows such an `end` without asking.
    const known = this.store.storedSeq;
    const end = known > this.#searchedTo ? known : await this.store.lastSeq();
    for (;;) {
      const from = Math.max(this.lastSeq, this.#searchedTo);
      const event = await this.store.nextAfter(from, TEAM_EVENTS);
      if (!event) {
        this.#searchedTo = Math.max(this.#searchedTo, end);
        return this;
      }
      this.#apply(event as StoredEvent<TeamEvent>);
    }
  }

  /** A user's teams, each with their role and when they joined it. */
  teamsOf(username: string): ReadonlyMap<string, Membership> {
    return this.#joined.get(username) ?? new Map();
  }

  #apply(event: StoredEvent<TeamEvent>): void {
    // Two readers catching up at once each fold every event once.
    if (event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    if (event.type === 'TeamMemberAdded') {
      const { username, role } = event.data;
      const teams = this.#joined.get(username) ?? new Map<string, Membership>();
      teams.set(event.aggregateId, { role, seq: teams.get(event.aggregateId)?.seq ?? event.seq });
      this.#joined.set(username, teams);
    } else if (event.type === 'TeamMemberRemoved') {
      this.#joined.get(event.data.username)?.delete(event.aggregateId);
    }
  }
}

/**
 * How long an index serves before a new one is folded from the log's start to take its place,
 * at the next look. A look answered by a server that had not yet stored a team event (a
 * replicated stream just after it elected a new leader) misses that event, and the looks after
 * it start past it: such a miss lasts until the new index is folded.
 */
const REBUILD_MS = 5 * 60_000;

/** A store's index, since when it serves, and whether a new one is being folded to replace it. */
interface HeldIndex {
  index: TeamIndex;
  sinceMs: number;
  rebuilding: boolean;
}

const indexes = new WeakMap<EventStore, HeldIndex>();

function teamIndex(store: EventStore): Promise<TeamIndex> {
  let held = indexes.get(store);
  if (!held) {
    held = { index: new TeamIndex(store), sinceMs: Date.now(), rebuilding: false };
    indexes.set(store, held);
  } else if (!held.rebuilding && Date.now() - held.sinceMs >= REBUILD_MS) {
    rebuild(store, held);
  }
  return held.index.current();
}

/**
 * Folds a new index from the log's start, in the background; the old one serves meanwhile. Its
 * walk folds every team event in order up to its last (a server that answers a look holds the
 * log up to some point), so it takes the old one's place only if it folded as far. Otherwise it
 * missed one the old one has, or the old one folded newer ones meanwhile: it is folded again in
 * 30 seconds.
 */
function rebuild(store: EventStore, held: HeldIndex): void {
  const startedMs = Date.now();
  const fresh = new TeamIndex(store);
  held.rebuilding = true;
  void fresh
    .current()
    .then(
      () => {
        if (fresh.lastSeq < held.index.lastSeq) return retrySoon(held);
        held.index = fresh;
        held.sinceMs = startedMs;
      },
      () => retrySoon(held),
    )
    .finally(() => {
      held.rebuilding = false;
    });
}

/** A new index is folded again in 30 seconds, not at every submission. */
function retrySoon(held: HeldIndex): void {
  held.sinceMs = Date.now() - REBUILD_MS + 30_000;
}

/**
 * The team a user's new job or session is charged to, decided once at submission from the log:
 * the one its spec names (one of theirs), else the first team they joined, else none.
 */
export async function teamToCharge(
  deps: Pick<ApiDeps, 'bus'>,
  username: string,
  named: string | undefined,
): Promise<string | undefined> {
  const teams = (await teamIndex(deps.bus.store)).teamsOf(username);
  if (named !== undefined) {
    if (!teams.has(named))
      throw new ApiError('VALIDATION_FAILED', `team: you are not in a team named ${named}`);
    return named;
  }
  let first: [string, Membership] | undefined;
  for (const entry of teams) if (first === undefined || entry[1].seq < first[1].seq) first = entry;
  return first?.[0];
}

/** A user's role in a team, as the log has it now; null when they are not in it. */
export async function teamRole(
  deps: Pick<ApiDeps, 'bus'>,
  username: string,
  team: string,
): Promise<TeamRole | null> {
  return (await teamIndex(deps.bus.store)).teamsOf(username).get(team)?.role ?? null;
}

/**
 * The teams (`member`'s, or all) from their projection, once it has applied every team event in
 * the log: a change to a team is seen by the next read.
 */
export async function currentTeams(deps: ApiDeps, member?: string) {
  await waitForSeq(deps, (await teamIndex(deps.bus.store)).lastSeq);
  return readModel(() => listTeams(deps.db, member));
}
