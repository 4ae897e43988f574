import {
  DomainError,
  evolveSession,
  initialSessionState,
  sessionDeadline,
  sessionEnded,
  type SessionLimits,
  type SessionState,
} from '@trainyard/domain';
import { Subjects, type SessionEvent, type StoredEvent } from '@trainyard/events';
import { runSessionCommand } from '@trainyard/application';
import { supervise, type ServiceContext } from '@trainyard/service-kit';

export interface RunningTimers {
  stop(): Promise<void>;
}

const MINUTE = 60_000;

/**
 * Session timers: follows the sessions' events and, when one's timer runs out (never connected,
 * idle, its hard cap, or its run not started in time), asks the session to stop, saying why. The decider checks the deadline
 * again on the session as the log has it, so a login or a channel that came meanwhile wins, and
 * two watchdogs asking at once stop it once.
 */
export function startSessionTimers(ctx: ServiceContext, checkEveryMs: number): RunningTimers {
  const log = ctx.log.child({ component: 'session-timers' });
  const limits: SessionLimits = {
    startMs: ctx.config.TRAINYARD_SESSION_START_LIMIT_MIN * MINUTE,
    stopMs: ctx.config.TRAINYARD_SESSION_STOP_LIMIT_MIN * MINUTE,
  };
  const sessions = new Map<string, SessionState>();
  const stopping = new AbortController();
  let read = 0;
  const following = supervise(
    'session-timers',
    () =>
      ctx.events.follow(
        {
          fromSeq: read + 1,
          filter: Subjects.aggregateEvents('session'),
          signal: stopping.signal,
          onStall: (at) =>
            log.warn({ read: at }, 'session timer reader stalled; starting it again'),
        },
        (e) => {
          read = e.seq;
          const event = e as StoredEvent<SessionEvent>;
          const before = sessions.get(e.aggregateId) ?? initialSessionState(e.aggregateId);
          const after = evolveSession(before, event, e.occurredAt);
          if (sessionEnded(after.status)) sessions.delete(e.aggregateId);
          else sessions.set(e.aggregateId, after);
        },
      ),
    stopping.signal,
    log,
  );

  async function check(): Promise<void> {
    const now = new Date();
    for (const [id, state] of sessions) {
      const deadline = sessionDeadline(state, limits);
      if (!deadline || deadline.at > now) continue;
      try {
        const { events } = await runSessionCommand(
          ctx.bus.store,
          id,
          { type: 'ExpireSession', now, limits },
          { actor: { kind: 'service', id: ctx.instanceId }, now },
        );
        if (events.length > 0)
          log.info({ sessionId: id, reason: deadline.reason }, 'session timer ran out');
      } catch (err) {
        if (!(err instanceof DomainError))
          log.warn({ err, sessionId: id }, 'could not stop a session');
      }
    }
  }

  let checking = Promise.resolve();
  const timer = setInterval(() => {
    checking = checking.then(check);
  }, checkEveryMs);
  return {
    stop: async () => {
      clearInterval(timer);
      stopping.abort();
      await Promise.all([following, checking]);
    },
  };
}
