import {
  retry,
  type AggregateHead,
  type AppendMeta,
  type EventStore,
  type SessionEvent,
  type StoredEvent,
} from '@trainyard/events';
import {
  decideSession,
  evolveSession,
  initialSessionState,
  type SessionCommand,
  type SessionState,
} from '@trainyard/domain';
import { newId } from '@trainyard/service-kit';
import { CONFLICTS } from './commands.ts';

/** The prefix of session ids, so that a session id is told from a job id at a glance. */
export const SESSION_ID_PREFIX = 'ses';

/**
 * A new session id: sortable and subject-safe like a job id. It is also the username of the
 * session's SSH logins, so it holds only lowercase letters, digits and `_`.
 */
export const newSessionId = (now = Date.now()): string => newId(SESSION_ID_PREFIX, now);

/** A session's state together with the head it was folded up to. */
export interface SessionSnapshot {
  state: SessionState;
  head: AggregateHead;
}

export interface SessionCommandResult extends SessionSnapshot {
  events: StoredEvent<SessionEvent>[];
}

/** Folds stored events onto a snapshot. */
export function foldSession(
  snapshot: SessionSnapshot,
  events: readonly StoredEvent<SessionEvent>[],
): SessionSnapshot {
  let state = snapshot.state;
  for (const e of events) state = evolveSession(state, e, e.occurredAt);
  const last = events[events.length - 1];
  return { state, head: last ? { seq: last.seq, hash: last.hash } : snapshot.head };
}

/** Reads a session from the log. */
export async function loadSession(store: EventStore, sessionId: string): Promise<SessionSnapshot> {
  const { events, head } = await store.load('session', sessionId);
  return { ...foldSession({ state: initialSessionState(sessionId), head }, events), head };
}

/**
 * Runs a command against a session: decide on the snapshot (or the log), append at its head,
 * and on a conflict reload and decide again, a bounded number of times. Domain rejections
 * propagate.
 */
export async function runSessionCommand(
  store: EventStore,
  sessionId: string,
  command: SessionCommand | ((state: SessionState) => SessionCommand),
  meta: AppendMeta,
  opts: { snapshot?: SessionSnapshot; ids?: string[] } = {},
): Promise<SessionCommandResult> {
  let snapshot = opts.snapshot ?? (await loadSession(store, sessionId));
  return retry(async (attempt) => {
    if (attempt > 1) snapshot = await loadSession(store, sessionId);
    const cmd = typeof command === 'function' ? command(snapshot.state) : command;
    const decided = decideSession(cmd, snapshot.state);
    if (decided.length === 0) return { ...snapshot, events: [] };
    const appended = await store.append({
      aggregate: 'session',
      aggregateId: sessionId,
      head: snapshot.head,
      events: decided,
      meta,
      ...(attempt === 1 && opts.ids && { ids: opts.ids }),
    });
    return { ...foldSession(snapshot, appended.events), events: appended.events };
  }, CONFLICTS);
}
