import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { retryTransient, type Role } from '@trainyard/events';
import { openBucket } from '@trainyard/service-kit';
import { ApiError } from './errors.ts';

/** How long a login lasts without a new password: its refresh token's life. */
export const SESSION_TTL_MS = 30 * 24 * 3600_000;

interface StoredSession {
  role: Role;
  createdAt: number;
  expiresAt: number;
  /** sha256 of the refresh token's secret part. */
  refreshHash: string;
}

/** A login's refresh token, `username.sid.secret`: what it holds, once read. */
interface RefreshToken {
  username: string;
  sid: string;
  secret: string;
}

const digest = (secret: string) => createHash('sha256').update(secret).digest('hex');
const sessionKey = (username: string, sid: string) => `${username}.${sid}`;

function parseRefresh(token: string): RefreshToken | null {
  const m = /^([a-z][a-z0-9_-]{1,31})\.([0-9a-f]{32})\.([A-Za-z0-9_-]{43})$/.exec(token);
  return m ? { username: m[1]!, sid: m[2]!, secret: m[3]! } : null;
}

/**
 * Logins as sessions, and what ends them. A session holds a refresh token (only its hash is
 * kept) that trades for short-lived access tokens. Logout ends a session; a password change or
 * a disabled user ends all of a user's sessions and every token issued before. What has been
 * revoked is kept in a bucket every API replica watches, so a revoked token stops working at
 * all of them within moments, without a lookup per request.
 */
export class SessionStore {
  readonly #cutoffs = new Map<string, number>();
  readonly #ended = new Set<string>();
  #watching: Promise<void> | null = null;
  #stopWatch: (() => void) | null = null;

  private constructor(
    private readonly sessions: KV,
    private readonly revocations: KV,
  ) {}

  static async open(js: JetStreamClient, replicas = 1): Promise<SessionStore> {
    const [sessions, revocations] = await Promise.all([
      openBucket(js, 'ty_sessions', { history: 1, replicas }),
      openBucket(js, 'ty_revocations', { history: 1, replicas, ttl: SESSION_TTL_MS + 3600_000 }),
    ]);
    const store = new SessionStore(sessions, revocations);
    await store.#watch();
    return store;
  }

  #apply(key: string, value: string): void {
    const [kind, id] = [key.slice(0, key.indexOf('.')), key.slice(key.indexOf('.') + 1)];
    if (kind === 'user') this.#cutoffs.set(id, Math.max(this.#cutoffs.get(id) ?? 0, Number(value)));
    else if (kind === 'session') this.#ended.add(id);
  }

  async #watch(): Promise<void> {
    const watcher = await retryTransient('watch the revocations', () => this.revocations.watch());
    this.#stopWatch = () => watcher.stop();
    this.#watching = (async () => {
      for await (const entry of watcher) {
        if (entry.operation === 'PUT') this.#apply(entry.key, entry.string());
      }
    })().catch(() => undefined);
    const keys = await retryTransient('read the revocations', async () => {
      const list: string[] = [];
      for await (const k of await this.revocations.keys()) list.push(k);
      return list;
    });
    for (const key of keys) {
      const entry = await this.revocations.get(key);
      if (entry?.operation === 'PUT') this.#apply(key, entry.string());
    }
  }

  /** Whether a token of `username`'s, from session `sid` and issued at `issuedAtMs`, was revoked. */
  isRevoked(username: string, sid: string | undefined, issuedAtMs: number): boolean {
    if (sid && this.#ended.has(sid)) return true;
    return issuedAtMs < (this.#cutoffs.get(username) ?? 0);
  }

  /** A new session for a login; returns its id and refresh token. */
  async start(username: string, role: Role): Promise<{ sid: string; refreshToken: string }> {
    const sid = randomBytes(16).toString('hex');
    const secret = randomBytes(32).toString('base64url');
    const now = Date.now();
    const session: StoredSession = {
      role,
      createdAt: now,
      expiresAt: now + SESSION_TTL_MS,
      refreshHash: digest(secret),
    };
    await retryTransient('keep the session', () =>
      this.sessions.create(sessionKey(username, sid), JSON.stringify(session)),
    );
    return { sid, refreshToken: `${username}.${sid}.${secret}` };
  }

  /**
   * Trades a refresh token for a new one on the same session. Each token works once: a token
   * used again (stolen, or replayed) ends its session.
   */
  async refresh(
    token: string,
  ): Promise<{ username: string; role: Role; sid: string; refreshToken: string }> {
    const parsed = parseRefresh(token);
    const refused = new ApiError('UNAUTHENTICATED', 'the refresh token is not valid; log in again');
    if (!parsed) throw refused;
    const key = sessionKey(parsed.username, parsed.sid);
    const entry = await retryTransient('read the session', () => this.sessions.get(key));
    if (!entry || entry.operation !== 'PUT' || this.#ended.has(parsed.sid)) throw refused;
    const session = entry.json<StoredSession>();
    const expected = Buffer.from(session.refreshHash, 'hex');
    const given = Buffer.from(digest(parsed.secret), 'hex');
    if (!timingSafeEqual(expected, given)) {
      await this.end(parsed.username, parsed.sid);
      throw refused;
    }
    if (
      session.expiresAt < Date.now() ||
      session.createdAt < (this.#cutoffs.get(parsed.username) ?? 0)
    )
      throw new ApiError('TOKEN_EXPIRED', 'the login has expired; log in again');
    const secret = randomBytes(32).toString('base64url');
    const next: StoredSession = { ...session, refreshHash: digest(secret) };
    try {
      await this.sessions.update(key, JSON.stringify(next), entry.revision);
    } catch {
      throw refused;
    }
    return {
      username: parsed.username,
      role: session.role,
      sid: parsed.sid,
      refreshToken: `${parsed.username}.${parsed.sid}.${secret}`,
    };
  }

  /** Ends one session: its refresh token and its access tokens stop working. */
  async end(username: string, sid: string): Promise<void> {
    this.#ended.add(sid);
    await retryTransient('revoke the session', () =>
      this.revocations.put(`session.${sid}`, String(Date.now())),
    );
    await this.sessions.delete(sessionKey(username, sid)).catch(() => undefined);
  }

  /** Ends every session of a user, and every token issued to it until now. */
  async endAll(username: string): Promise<void> {
    const now = Date.now();
    this.#cutoffs.set(username, now);
    await retryTransient('revoke the user’s tokens', () =>
      this.revocations.put(`user.${username}`, String(now)),
    );
    const keys: string[] = [];
    for await (const k of await this.sessions.keys(`${username}.*`)) keys.push(k);
    for (const k of keys) await this.sessions.delete(k).catch(() => undefined);
  }

  async stop(): Promise<void> {
    this.#stopWatch?.();
    await this.#watching;
  }
}
