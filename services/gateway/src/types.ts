import type { Channel, ChannelRequest } from '@trainyard/tunnel';
import type { LoginLimits } from './rate-limit.ts';

/** Where a logged-in connection's channels go: the session, and the worker and run holding it. */
export interface SessionRoute {
  sessionId: string;
  workerId: string;
  runId: string;
}

/**
 * What the dependencies say about a login. `reason` is a stable code (`badPassword`,
 * `notYours`, `noSuchSession`, `notRunning`…) recorded with the attempt; the client only
 * ever sees "permission denied".
 */
export type LoginDecision =
  | { ok: true; user: string; route: SessionRoute }
  | { ok: false; user: string | null; reason: string };

/** One finished login attempt, accepted or refused. */
export interface LoginAttempt {
  session: string;
  user: string | null;
  method: 'password' | 'publickey';
  accepted: boolean;
  reason?: string;
  source: string;
}

/**
 * Everything the SSH server needs from the rest of the gateway. It knows nothing of NATS nor of
 * how sessions are looked up: these functions do.
 */
export interface GatewayDeps {
  /** The private host key (OpenSSH or PEM). */
  hostKey: string | Buffer;
  /** One-time-password login: the SSH username names the session. */
  passwordLogin(session: string, password: string, source: string): Promise<LoginDecision>;
  /**
   * Is this public key (SSH wire-format blob and algorithm) one the session's owner
   * registered? Asked for the client's query and again for its signed attempt.
   */
  keyLogin(
    session: string,
    key: { algo: string; data: Buffer },
    source: string,
  ): Promise<LoginDecision>;
  /** Every finished login attempt; not called for public-key queries that carry no signature. */
  onLogin(attempt: LoginAttempt): void;
  /** Opens a channel in the session (the tunnel to the worker). */
  open(route: SessionRoute, request: ChannelRequest): Promise<Channel>;
  /** A connection from `source` was dropped: as many from there were logging in as may. */
  onCrowded?(source: string): void;
  /** A session's open channels went from 0 to 1 (`true`) or from 1 to 0 (`false`). */
  onActivity?(route: SessionRoute, active: boolean): void;
  limits?: LoginLimits;
}
