import { randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { jwtVerify, SignJWT } from 'jose';
import { EventStoreError, retry, retryTransient, type Role } from '@trainyard/events';
import { openBucket } from '@trainyard/service-kit';
import { ApiError } from './errors.ts';

const VERIFIED_CACHE_SIZE = 10_000;

/** How long an access token lasts; a session's refresh token gets the next one. */
export const DEFAULT_TOKEN_TTL_S = 15 * 60;
const scrypt = promisify(scryptCb) as (pw: string, salt: Buffer, len: number) => Promise<Buffer>;

/** Who is calling, from a verified token. */
export interface Caller {
  username: string;
  role: Role;
  /** The login session the token belongs to; tokens minted in-process have none. */
  sid?: string;
}

interface StoredCredential {
  salt: string;
  hash: string;
  role: Role;
  disabled?: boolean;
}

/** What checking a password found. */
export type PasswordCheck = { ok: true; role: Role } | { ok: false; disabled: boolean };

/** Whether a token was revoked since it was issued (see `SessionStore`). */
export type RevocationCheck = (
  username: string,
  sid: string | undefined,
  issuedAtMs: number,
) => boolean;

async function hashPassword(password: string, salt: Buffer): Promise<Buffer> {
  return scrypt(password, salt, 32);
}

/**
 * Password hashes live in a KV bucket, never in the event log: the log is kept forever and
 * read by every consumer.
 */
export class CredentialStore {
  private constructor(private readonly kv: KV) {}

  static async open(js: JetStreamClient, replicas = 1): Promise<CredentialStore> {
    return new CredentialStore(await openBucket(js, 'ty_credentials', { history: 1, replicas }));
  }

  async exists(username: string): Promise<boolean> {
    const entry = await retryTransient('read the credentials', () => this.kv.get(username));
    return entry !== null && entry.operation === 'PUT';
  }

  async set(username: string, password: string, role: Role): Promise<void> {
    const salt = randomBytes(16);
    const hash = await hashPassword(password, salt);
    const cred: StoredCredential = { salt: salt.toString('hex'), hash: hash.toString('hex'), role };
    await retryTransient('store the credentials', () =>
      this.kv.put(username, JSON.stringify(cred)),
    );
  }

  /** Keeps the user's hash and role, and refuses its logins from now on. */
  async disable(username: string): Promise<void> {
    const entry = await retryTransient('read the credentials', () => this.kv.get(username));
    if (!entry || entry.operation !== 'PUT') return;
    const cred = { ...entry.json<StoredCredential>(), disabled: true };
    await retryTransient('store the credentials', () =>
      this.kv.put(username, JSON.stringify(cred)),
    );
  }

  /** Whether the password is the user's (and the account enabled). Takes the same time either way. */
  async check(username: string, password: string): Promise<PasswordCheck> {
    const entry = await retryTransient('read the credentials', () => this.kv.get(username)).catch(
      (err: unknown) => {
        if (err instanceof EventStoreError) throw err;
        return null;
      },
    );
    const cred = entry?.operation === 'PUT' ? (entry.json() as StoredCredential) : null;
    const salt = cred ? Buffer.from(cred.salt, 'hex') : randomBytes(16);
    const actual = await hashPassword(password, salt);
    if (!cred) return { ok: false, disabled: false };
    const expected = Buffer.from(cred.hash, 'hex');
    const matches = expected.length === actual.length && timingSafeEqual(expected, actual);
    if (!matches) return { ok: false, disabled: false };
    return cred.disabled ? { ok: false, disabled: true } : { ok: true, role: cred.role };
  }

  /** The user's role when the password matches, else null. Takes the same time either way. */
  async verify(username: string, password: string): Promise<Role | null> {
    const checked = await this.check(username, password);
    return checked.ok ? checked.role : null;
  }
}

/** Issues and checks the API's bearer tokens (HS256). */
export class TokenIssuer {
  /** Tokens already checked, until they expire: verifying costs more than most requests. */
  readonly #verified = new Map<string, { caller: Caller; expiresMs: number; issuedAtMs: number }>();
  readonly #key: Uint8Array;
  constructor(
    secret: string,
    readonly ttlSeconds = DEFAULT_TOKEN_TTL_S,
    private readonly revoked: RevocationCheck = () => false,
  ) {
    this.#key = new TextEncoder().encode(secret);
  }

  #checkRevoked(caller: Caller, issuedAtMs: number): Caller {
    if (this.revoked(caller.username, caller.sid, issuedAtMs))
      throw new ApiError(
        'TOKEN_REVOKED',
        'the token was revoked (logged out, or a new password); log in again',
      );
    return caller;
  }

  async issue(caller: Caller): Promise<string> {
    return (await this.issueWithExpiry(caller)).token;
  }

  /**
   * A token and when it stops being accepted. It carries its session and the millisecond it was
   * issued, against which a revocation (a logout, a new password) is checked.
   */
  async issueWithExpiry(caller: Caller): Promise<{ token: string; expiresAt: Date }> {
    const now = Date.now();
    const expiresAt = new Date(Math.floor(now / 1000) * 1000 + this.ttlSeconds * 1000);
    const token = await new SignJWT({
      role: caller.role,
      iat_ms: now,
      ...(caller.sid && { sid: caller.sid }),
    })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject(caller.username)
      .setIssuer('trainyard')
      .setIssuedAt(Math.floor(now / 1000))
      .setJti(randomBytes(12).toString('base64url'))
      .setExpirationTime(expiresAt)
      .sign(this.#key);
    return { token, expiresAt };
  }

  async verify(header: string | undefined): Promise<Caller> {
    const token = /^bearer /i.test(header ?? '') ? header!.slice(7).trim() : null;
    if (!token) throw new ApiError('UNAUTHENTICATED', 'missing bearer token');
    const cached = this.#verified.get(token);
    if (cached && cached.expiresMs > Date.now())
      return this.#checkRevoked(cached.caller, cached.issuedAtMs);
    let verified: { caller: Caller; expiresMs: number; issuedAtMs: number };
    try {
      const { payload } = await jwtVerify(token, this.#key, {
        issuer: 'trainyard',
        algorithms: ['HS256'],
      });
      const role = payload.role === 'admin' ? 'admin' : 'user';
      if (!payload.sub || !payload.exp) throw new Error('no subject or expiry');
      const sid = typeof payload.sid === 'string' ? payload.sid : undefined;
      const issuedAtMs =
        typeof payload.iat_ms === 'number' ? payload.iat_ms : (payload.iat ?? 0) * 1000;
      verified = {
        caller: { username: payload.sub, role, ...(sid && { sid }) },
        expiresMs: payload.exp * 1000,
        issuedAtMs,
      };
    } catch (cause) {
      if ((cause as { code?: string }).code === 'ERR_JWT_EXPIRED') {
        throw new ApiError('TOKEN_EXPIRED', 'the token has expired; log in again', undefined, {
          cause,
        });
      }
      throw new ApiError('UNAUTHENTICATED', 'the token is not valid; log in again', undefined, {
        cause,
      });
    }
    if (this.#verified.size >= VERIFIED_CACHE_SIZE) this.#verified.clear();
    this.#verified.set(token, verified);
    return this.#checkRevoked(verified.caller, verified.issuedAtMs);
  }
}

/** How often an API tries to settle the shared token secret before it gives up starting. */
const SECRET_TRIES = 8;

/**
 * The token secret: from the environment, else one shared through KV by every API replica. The
 * first replica's candidate wins; a write or read that fails or comes back empty (a cluster
 * still electing, a replica not yet caught up) is tried again, a bounded number of times.
 */
export async function loadTokenSecret(
  js: JetStreamClient,
  fromEnv: string | undefined,
  replicas = 1,
): Promise<string> {
  if (fromEnv) return fromEnv;
  const kv = await openBucket(js, 'ty_config', { history: 1, replicas });
  const candidate = randomBytes(32).toString('hex');
  return retry(
    async (attempt) => {
      await kv.create('jwt-secret', candidate).catch(() => undefined);
      const entry = await kv.get('jwt-secret').catch(() => null);
      if (entry) return entry.string();
      throw new Error(`could not settle the token secret in ty_config after ${attempt} tries`);
    },
    { attempts: SECRET_TRIES, baseMs: 250 },
  );
}
