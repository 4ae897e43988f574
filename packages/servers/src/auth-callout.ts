/**
 * Worker logins on a nats-server whose users are fixed in its config (`infra/nats`). The server
 * asks who a connecting client is when it is none of its fixed logins (an auth callout,
 * nats-server 2.10): this answers for enrolled workers. A client that shows an enrolled key,
 * and proves it holds it by signing the server's nonce, is let into the workers' account with
 * that worker's permissions (`workerPermissions`); any other is refused. When a key is revoked,
 * the connections it opened are closed through the system account.
 */
import {
  decode,
  encodeAuthorizationResponse,
  encodeUser,
  type AuthorizationRequest,
  type Permission,
} from '@nats-io/jwt';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { createAccount, fromPublic, fromSeed, type KeyPair } from '@nats-io/nkeys';
import { supervise } from '@trainyard/service-kit';
import type { Logger } from '@trainyard/service-kit';
import type { NatsPermissions } from './nats-server.ts';
import { WORKER_ACCOUNT, workerPermissions } from './permissions.ts';
import type { WorkerKeys } from '@trainyard/application';

/** Where nats-server asks, in the callout's account. */
export const AUTH_CALLOUT_SUBJECT = '$SYS.REQ.USER.AUTH';
/** How many connections of one worker are remembered, to close when its key is revoked. */
const CONNECTIONS_KEPT = 16;
const KICK_TIMEOUT_MS = 2_000;

export interface AuthCalloutOptions {
  /** A connection as the callout's login, in the account `auth_callout.account` names. */
  auth: NatsConnection;
  /** A connection in the system account, which closes a revoked worker's connections. */
  system: NatsConnection;
  /** The seed of the account nkey whose public half is `auth_callout.issuer`. */
  issuerSeed: string;
  keys: WorkerKeys;
  log: Logger;
  /** Made ready before a worker's first login (its object store bucket, when NATS holds blobs). */
  prepare?: (worker: string) => Promise<void>;
}

/** A new account nkey to sign the callout's answers: nats-server is given its public half. */
export function createAuthIssuer(): { publicKey: string; seed: string } {
  const issuer = createAccount();
  return { publicKey: issuer.getPublicKey(), seed: new TextDecoder().decode(issuer.getSeed()) };
}

/** The key pair of an issuer's seed; an error says so when it is no account nkey seed. */
export function authIssuer(seed: string): KeyPair {
  let issuer: KeyPair | null = null;
  try {
    issuer = fromSeed(new TextEncoder().encode(seed));
  } catch {
    issuer = null;
  }
  if (!issuer?.getPublicKey().startsWith('A')) {
    throw new Error('the auth callout issuer is no account nkey seed (SA…)');
  }
  return issuer;
}

/** Where a connection the callout let in lives: the server it is on and its id there. */
interface Connection {
  server: string;
  cid: number;
}

/** A subject permission as a user JWT states it. */
const asClaim = (p: { allow?: string[]; deny?: string[] } | undefined): Partial<Permission> => ({
  ...(p?.allow && { allow: p.allow }),
  ...(p?.deny && { deny: p.deny }),
});

const claimsOf = (permissions: NatsPermissions) => ({
  pub: asClaim(permissions.publish),
  sub: asClaim(permissions.subscribe),
});

/** Whether `sig` (base64) is `publicKey`'s signature of the server's nonce. */
function signedNonce(publicKey: string, nonce: string, sig: string): boolean {
  try {
    return fromPublic(publicKey).verify(
      new TextEncoder().encode(nonce),
      Buffer.from(sig, 'base64'),
    );
  } catch {
    return false;
  }
}

export function startAuthCallout(opts: AuthCalloutOptions): { stop(): Promise<void> } {
  const log = opts.log.child({ component: 'auth-callout' });
  const issuer = authIssuer(opts.issuerSeed);
  const stopping = new AbortController();
  /** Enrolled keys, by public key; empty until the first read of the keys. */
  let enrolled = new Map<string, string>();
  const connections = new Map<string, Connection[]>();
  const prepared = new Set<string>();

  const kick = async (worker: string) => {
    const open = connections.get(worker) ?? [];
    connections.delete(worker);
    for (const { server, cid } of open) {
      await opts.system
        .request(`$SYS.REQ.SERVER.${server}.KICK`, JSON.stringify({ cid }), {
          timeout: KICK_TIMEOUT_MS,
        })
        .then(() => log.info({ worker, cid }, 'closed a revoked worker’s connection'))
        .catch((err: unknown) =>
          log.warn({ err, worker, cid }, 'could not close a revoked worker’s connection'),
        );
    }
  };

  const watching = supervise(
    'worker keys',
    () =>
      opts.keys.watch(stopping.signal, (records) => {
        const next = new Map<string, string>();
        for (const r of records) if (r.status === 'enrolled') next.set(r.publicKey, r.name);
        for (const [key, name] of enrolled) {
          if (next.get(key) !== name) void kick(name);
        }
        enrolled = next;
      }),
    stopping.signal,
    log,
  );

  const answer = async (msg: Msg, request: AuthorizationRequest, data: object) =>
    msg.respond(
      await encodeAuthorizationResponse(request.user_nkey, request.server_id.id, issuer, data, {}),
    );

  const handle = async (msg: Msg) => {
    let request: AuthorizationRequest;
    try {
      request = decode<AuthorizationRequest>(msg.string()).nats as AuthorizationRequest;
    } catch (err) {
      log.warn({ err }, 'an auth request that is no JWT');
      return;
    }
    const { nkey, sig } = request.connect_opts;
    const nonce = request.client_info.nonce;
    const worker = nkey ? enrolled.get(nkey) : undefined;
    if (!worker || !nkey || !sig || !nonce || !signedNonce(nkey, nonce, sig)) {
      log.warn(
        { key: nkey?.slice(0, 12) ?? null, host: request.client_info.host ?? null },
        'refused a login that is no enrolled worker’s key',
      );
      await answer(msg, request, { error: 'not an enrolled worker key' });
      return;
    }
    if (opts.prepare && !prepared.has(worker)) {
      await opts.prepare(worker);
      prepared.add(worker);
    }
    const jwt = await encodeUser(
      worker,
      request.user_nkey,
      issuer,
      claimsOf(workerPermissions(worker)),
      { aud: WORKER_ACCOUNT },
    );
    const open = connections.get(worker) ?? [];
    open.push({ server: request.server_id.id, cid: request.client_info.id ?? 0 });
    connections.set(worker, open.slice(-CONNECTIONS_KEPT));
    await answer(msg, request, { jwt });
    log.info({ worker, host: request.client_info.host ?? null }, 'let a worker in');
  };

  const sub = opts.auth.subscribe(AUTH_CALLOUT_SUBJECT, { queue: 'trainyard-auth' });
  const running = new Set<Promise<void>>();
  const loop = (async () => {
    for await (const msg of sub) {
      const done = handle(msg)
        .catch((err: unknown) => log.error({ err }, 'could not answer an auth request'))
        .finally(() => running.delete(done));
      running.add(done);
    }
  })();

  return {
    stop: async () => {
      await sub.drain();
      await loop;
      await Promise.all(running);
      stopping.abort();
      await watching;
    },
  };
}
