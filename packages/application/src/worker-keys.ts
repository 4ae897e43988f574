/**
 * Worker identities. An admin issues a one-time enrolment token; a worker redeems it with the
 * public half of an nkey it made, and from then on connects to NATS with that key, as a user of
 * its own allowed only its own subjects (`workerPermissions`). Revoking the key takes the user
 * away: nats-server closes its connection when it reloads its users.
 *
 * Tokens are kept by their sha256 only, in `ty_enrolments`; keys in `ty_worker_keys`. Neither
 * bucket is open to a worker login.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { fromPublic } from '@nats-io/nkeys';
import { onAbort, openBucket } from '@trainyard/service-kit';

/** A worker name: one NATS subject token, also a consumer name's part. */
export const WORKER_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const TOKEN_PREFIX = 'tyw_';
export const DEFAULT_ENROLMENT_TTL_S = 3600;
export const MAX_ENROLMENT_TTL_S = 7 * 24 * 3600;

export interface EnrolmentToken {
  /** The worker it is for; null lets the worker choose a name that is not taken. */
  name: string | null;
  createdBy: string;
  expiresAt: string;
}

export interface WorkerKey {
  status: 'enrolled';
  name: string;
  /** The worker's nkey public key (`U…`). */
  publicKey: string;
  enrolledAt: string;
  /** Who issued the token it enrolled with. */
  issuedBy: string;
}

/** What is kept of a worker whose key was revoked: it may come back only with a named token. */
export interface WorkerRevocation {
  status: 'revoked';
  name: string;
  revokedAt: string;
  revokedBy: string;
}

export type WorkerRecord = WorkerKey | WorkerRevocation;

/** Why an enrolment was refused; `code` is the API's. */
export class EnrolmentError extends Error {
  override name = 'EnrolmentError';
  constructor(
    readonly code: 'ENROLMENT_REFUSED' | 'WORKER_EXISTS' | 'VALIDATION_FAILED',
    message: string,
  ) {
    super(message);
  }
}

const digest = (token: string) => createHash('sha256').update(token).digest('hex');

/** True when `key` is an nkey user's public key. */
export function isUserPublicKey(key: string): boolean {
  if (!key.startsWith('U')) return false;
  try {
    fromPublic(key);
    return true;
  } catch {
    return false;
  }
}

export class WorkerKeys {
  #tokens: Promise<KV> | null = null;

  private constructor(
    private readonly js: JetStreamClient,
    private readonly replicas: number,
    private readonly keys: KV,
  ) {}

  static async open(js: JetStreamClient, replicas: number): Promise<WorkerKeys> {
    return new WorkerKeys(
      js,
      replicas,
      await openBucket(js, 'ty_worker_keys', { history: 1, replicas }),
    );
  }

  /** The enrolment tokens, opened when first used: only the API issues and redeems them. */
  private get tokens(): Promise<KV> {
    this.#tokens ??= openBucket(this.js, 'ty_enrolments', { history: 1, replicas: this.replicas });
    this.#tokens.catch(() => (this.#tokens = null));
    return this.#tokens;
  }

  /** Makes a one-time token; only its digest is kept. */
  async issue(name: string | null, ttlSeconds: number, createdBy: string) {
    const token = TOKEN_PREFIX + randomBytes(32).toString('base64url');
    const expiresAt = new Date(Date.now() + ttlSeconds * 1000).toISOString();
    const entry: EnrolmentToken = { name, createdBy, expiresAt };
    await (await this.tokens).create(digest(token), JSON.stringify(entry));
    return { token, name, expiresAt };
  }

  /**
   * Spends a token on a worker's key. The token works once, before it expires, for the name it
   * names (or any name not enrolled yet). Enrolling a name again replaces its key, so a token
   * naming a worker is how an admin gives a rebuilt host its name back.
   */
  async redeem(
    token: string,
    name: string,
    publicKey: string,
    /** Whether a worker of that name is known otherwise (it registered with another login). */
    known: (name: string) => Promise<boolean> = async () => false,
  ): Promise<WorkerKey> {
    if (!WORKER_NAME.test(name)) {
      throw new EnrolmentError(
        'VALIDATION_FAILED',
        'a worker name is 1 to 64 letters, digits, _ or -',
      );
    }
    if (!isUserPublicKey(publicKey)) {
      throw new EnrolmentError('VALIDATION_FAILED', 'publicKey is not an nkey user public key');
    }
    const refused = new EnrolmentError(
      'ENROLMENT_REFUSED',
      'this enrolment token is unknown, used or expired: ask an admin for a new one (trainyard worker token create)',
    );
    if (!token.startsWith(TOKEN_PREFIX)) throw refused;
    const key = digest(token);
    const tokens = await this.tokens;
    const found = await tokens.get(key);
    if (!found || found.operation !== 'PUT' || found.length === 0) throw refused;
    const issued = found.json<EnrolmentToken>();
    if (Date.parse(issued.expiresAt) <= Date.now()) {
      await tokens.purge(key).catch(() => undefined);
      throw refused;
    }
    if (issued.name !== null && issued.name !== name) {
      throw new EnrolmentError(
        'ENROLMENT_REFUSED',
        `this enrolment token is for the worker ${issued.name}, not ${name}`,
      );
    }
    const taken = new EnrolmentError(
      'WORKER_EXISTS',
      `the name ${name} is taken (by a worker enrolled, revoked or registered): choose another name, or ask for a token that names it`,
    );
    if (issued.name === null && ((await this.record(name)) || (await known(name)))) throw taken;
    try {
      await tokens.delete(key, { previousSeq: found.revision });
    } catch {
      throw refused;
    }
    const worker: WorkerKey = {
      status: 'enrolled',
      name,
      publicKey,
      enrolledAt: new Date().toISOString(),
      issuedBy: issued.createdBy,
    };
    if (issued.name === null) {
      await this.keys.create(name, JSON.stringify(worker)).catch(() => {
        throw taken;
      });
    } else {
      await this.keys.put(name, JSON.stringify(worker));
    }
    return worker;
  }

  /** What is kept of a worker: its key, its revocation, or null. */
  async record(name: string): Promise<WorkerRecord | null> {
    if (!WORKER_NAME.test(name)) return null;
    const found = await this.keys.get(name);
    return found && found.operation === 'PUT' && found.length > 0
      ? found.json<WorkerRecord>()
      : null;
  }

  /** A worker's key, unless it has none or it was revoked. */
  async get(name: string): Promise<WorkerKey | null> {
    const record = await this.record(name);
    return record?.status === 'enrolled' ? record : null;
  }

  /** Takes a worker's key away, keeping that it was revoked; false when it had none. */
  async revoke(name: string, by: string): Promise<boolean> {
    if (!WORKER_NAME.test(name)) return false;
    const found = await this.keys.get(name);
    if (!found || found.operation !== 'PUT' || found.length === 0) return false;
    if (found.json<WorkerRecord>().status !== 'enrolled') return false;
    const revocation: WorkerRevocation = {
      status: 'revoked',
      name,
      revokedAt: new Date().toISOString(),
      revokedBy: by,
    };
    await this.keys.update(name, JSON.stringify(revocation), found.revision);
    return true;
  }

  /**
   * Calls `onChange` with every worker's record, first with those kept now, then after each
   * change, until `signal` aborts.
   */
  async watch(signal: AbortSignal, onChange: (records: WorkerRecord[]) => void): Promise<void> {
    const current = new Map<string, WorkerRecord>();
    const watcher = await this.keys.watch();
    const unlisten = onAbort(signal, () => watcher.stop());
    let caughtUp = false;
    const emit = () => onChange([...current.values()]);
    try {
      for await (const e of watcher) {
        if (e.operation === 'PUT' && e.length > 0) current.set(e.key, e.json<WorkerRecord>());
        else current.delete(e.key);
        if (caughtUp || e.delta === 0) {
          caughtUp = true;
          emit();
        }
      }
    } finally {
      unlisten();
    }
  }
}
