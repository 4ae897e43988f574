import {
  evolveSession,
  initialSessionState,
  runHolder,
  sessionEnded,
  type SessionState,
} from '@trainyard/domain';
import type { SessionEvent, StoredEvent, UserEvent } from '@trainyard/events';

/** Whose connections end, a session's or a user's, and why, as its user is told. */
export type Ending = { sessionId: string; message: string } | { user: string; message: string };

/**
 * What the gateway knows of sessions and users, folded from the log: each session's owner,
 * status and the run that holds it; each registered public key's owner; disabled users.
 */
export class Directory {
  readonly #sessions = new Map<string, SessionState>();
  /** Registered public keys, by the base64 of their SSH wire-format blob: whose each is. */
  readonly #keys = new Map<string, string>();
  /** Each user's keys, by fingerprint: the blob, to find it again when it is removed. */
  readonly #userKeys = new Map<string, Map<string, string>>();
  readonly #disabled = new Set<string>();

  /** Folds one event; says when a session's connections must end, and why. */
  apply(event: StoredEvent): Ending | null {
    if (event.aggregate === 'user') {
      return this.#applyUser(event.aggregateId, event as StoredEvent<UserEvent>);
    }
    if (event.aggregate !== 'session') return null;
    const e = event as StoredEvent<SessionEvent>;
    // A session is known from its request on: an event of one that ended (a login recorded as
    // it stopped) does not bring it back.
    if (!this.#sessions.has(e.aggregateId) && e.type !== 'SessionRequested') return null;
    const before = this.#sessions.get(e.aggregateId) ?? initialSessionState(e.aggregateId);
    const after = evolveSession(before, e, e.occurredAt);
    if (sessionEnded(after.status)) this.#sessions.delete(e.aggregateId);
    else this.#sessions.set(e.aggregateId, after);
    const held = runHolder(before);
    if (!held || runHolder(after)?.id === held.id) {
      return after.status === 'stopping' && before.status !== 'stopping'
        ? { sessionId: e.aggregateId, message: stoppingMessage(after) }
        : null;
    }
    return {
      sessionId: e.aggregateId,
      message:
        e.type === 'SessionRequeued'
          ? `trainyard: the session's worker was lost; it starts again elsewhere, without what it held. Connect again once it runs.`
          : stoppingMessage(after),
    };
  }

  /** A session that has not ended, and the run that holds it. */
  session(id: string): { state: SessionState; run: ReturnType<typeof runHolder> } | null {
    const state = this.#sessions.get(id);
    return state ? { state, run: runHolder(state) } : null;
  }

  /** Whose registered key this is (the SSH wire-format blob), or null. */
  keyOwner(blob: Buffer): string | null {
    return this.#keys.get(blob.toString('base64')) ?? null;
  }

  disabled(user: string): boolean {
    return this.#disabled.has(user);
  }

  #applyUser(user: string, event: StoredEvent<UserEvent>): Ending | null {
    switch (event.type) {
      case 'UserSshKeyAdded': {
        const blob = event.data.publicKey.trim().split(/\s+/)[1] ?? '';
        // A key belongs to whoever registered it first, as the read model has it.
        if (this.#keys.has(blob)) return null;
        this.#keys.set(blob, user);
        const own = this.#userKeys.get(user) ?? new Map<string, string>();
        own.set(event.data.fingerprint, blob);
        this.#userKeys.set(user, own);
        return null;
      }
      case 'UserSshKeyRemoved': {
        const blob = this.#userKeys.get(user)?.get(event.data.fingerprint);
        if (blob !== undefined && this.#keys.get(blob) === user) this.#keys.delete(blob);
        this.#userKeys.get(user)?.delete(event.data.fingerprint);
        return null;
      }
      case 'UserDisabled':
        this.#disabled.add(user);
        return { user, message: 'trainyard: your account was disabled.' };
      default:
        return null;
    }
  }
}

const REASONS: Record<string, string> = {
  user: 'it was stopped',
  neverConnected: 'no one connected to it in time',
  idle: 'it was idle for too long',
  maxDuration: 'it reached its time limit',
  startTimeout: 'it did not start in time on its worker',
};

function stoppingMessage(state: SessionState): string {
  const why = state.stopReason ? REASONS[state.stopReason] : 'it ended';
  return `trainyard: session ${state.id} is stopping: ${why ?? 'it ended'}.`;
}
