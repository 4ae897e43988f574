import { createHash, timingSafeEqual } from 'node:crypto';
import { Kvm, type KV } from '@nats-io/kv';
import { DomainError } from '@trainyard/domain';
import {
  runSessionCommand,
  SSH_PASSWORDS_BUCKET,
  type StoredSshPassword,
} from '@trainyard/application';
import { Subjects, type StoredEvent } from '@trainyard/events';
import { supervise, type ServiceContext } from '@trainyard/service-kit';
import { TunnelClient } from '@trainyard/tunnel';
import { Directory } from './directory.ts';
import { loadHostKey } from './host-key.ts';
import type { LoginLimits } from './rate-limit.ts';
import { SshGateway } from './ssh-server.ts';
import type { LoginAttempt, LoginDecision } from './types.ts';

export interface GatewayOptions {
  /** Where the SSH server listens (`TRAINYARD_SSH_PORT`; 0 picks a free port). */
  port: number;
  host: string;
  limits?: LoginLimits;
  /** How often each channel's tunnel checks that the worker is still there. */
  keepaliveMs?: number;
}

export interface RunningGateway {
  /** The port the SSH server listens on. */
  readonly port: number;
  readonly hostKeyFingerprint: string;
  stop(): Promise<void>;
}

const refused = (reason: string, user: string | null = null): LoginDecision => ({
  ok: false,
  user,
  reason,
});

/**
 * The SSH gateway: an SSH server whose username names a session. It logs users in by a
 * one-time password the API issued (kept as a hash in KV, deleted as it is used) or a public
 * key they registered (from the log), records every finished login on the session, carries each
 * channel to the worker that holds the session over the tunnel, and ends a session's
 * connections when it stops or moves.
 */
export async function startGateway(
  ctx: ServiceContext,
  opts: GatewayOptions,
): Promise<RunningGateway> {
  const log = ctx.log.child({ component: 'gateway' });
  const hostKey = await loadHostKey(ctx.bus.js, ctx.config.TRAINYARD_STREAM_REPLICAS);
  const directory = new Directory();
  const tunnel = new TunnelClient(ctx.bus.nc, {
    ...(opts.keepaliveMs !== undefined && { keepaliveMs: opts.keepaliveMs }),
  });
  let passwords: KV | null = null;
  const passwordBucket = async () =>
    (passwords ??= await new Kvm(ctx.bus.js).open(SSH_PASSWORDS_BUCKET));

  async function passwordLogin(session: string, password: string): Promise<LoginDecision> {
    const found = directory.session(session);
    if (!found) return refused('noSuchSession');
    const { state, run } = found;
    if (!run || state.status !== 'running') return refused('notRunning');
    const entry = await (await passwordBucket()).get(session).catch(() => null);
    if (!entry || entry.operation !== 'PUT') return refused('badPassword');
    const stored = entry.json<StoredSshPassword>();
    const given = createHash('sha256').update(password).digest();
    const kept = Buffer.from(stored.sha256, 'hex');
    if (kept.length !== given.length || !timingSafeEqual(kept, given)) {
      return refused('badPassword');
    }
    if (Date.parse(stored.expiresAt) <= Date.now()) return refused('passwordExpired', state.owner);
    if (stored.runId !== run.id) return refused('passwordExpired', state.owner);
    // Used once: only the login that deletes this very revision gets in.
    try {
      await (await passwordBucket()).delete(session, { previousSeq: entry.revision });
    } catch {
      return refused('passwordUsed', state.owner);
    }
    if (directory.disabled(state.owner)) return refused('accountDisabled', state.owner);
    return {
      ok: true,
      user: state.owner,
      route: { sessionId: session, workerId: run.workerId, runId: run.id },
    };
  }

  function keyLogin(session: string, key: { data: Buffer }): Promise<LoginDecision> {
    const found = directory.session(session);
    if (!found) return Promise.resolve(refused('noSuchSession'));
    const { state, run } = found;
    const owner = directory.keyOwner(key.data);
    if (!owner) return Promise.resolve(refused('unknownKey'));
    if (owner !== state.owner) return Promise.resolve(refused('notYours', owner));
    if (directory.disabled(owner)) return Promise.resolve(refused('accountDisabled', owner));
    if (!run || state.status !== 'running') return Promise.resolve(refused('notRunning', owner));
    return Promise.resolve({
      ok: true,
      user: owner,
      route: { sessionId: session, workerId: run.workerId, runId: run.id },
    });
  }

  function onLogin(attempt: LoginAttempt): void {
    const level = attempt.accepted ? 'info' : 'warn';
    log[level](
      {
        session: attempt.session,
        user: attempt.user,
        method: attempt.method,
        source: attempt.source,
        reason: attempt.reason,
      },
      attempt.accepted ? 'ssh login' : 'ssh login refused',
    );
    if (!directory.session(attempt.session)) return;
    runSessionCommand(
      ctx.bus.store,
      attempt.session,
      {
        type: 'RecordLogin',
        user: attempt.user,
        method: attempt.method,
        accepted: attempt.accepted,
        ...(attempt.reason !== undefined && { reason: attempt.reason }),
        source: attempt.source.slice(0, 64),
      },
      { actor: { kind: 'service', id: ctx.instanceId }, now: new Date() },
    ).catch((err: unknown) => {
      if (!(err instanceof DomainError)) log.warn({ err }, 'could not record a login');
    });
  }

  const server = new SshGateway({
    hostKey: hostKey.privateKey,
    passwordLogin,
    keyLogin,
    onLogin,
    open: (route, request) =>
      tunnel.open(route.workerId, { sessionId: route.sessionId, runId: route.runId }, request),
    ...(opts.limits && { limits: opts.limits }),
  });

  const stopping = new AbortController();
  const onEvent = (event: StoredEvent) => {
    const ending = directory.apply(event);
    if (!ending) return;
    const closed = server.closeSession(ending.sessionId, ending.message);
    if (closed > 0) log.info({ sessionId: ending.sessionId, closed }, 'session connections ended');
    void passwordBucket()
      .then((kv) => kv.delete(ending.sessionId))
      .catch(() => undefined);
  };
  /**
   * Sessions' events and users' (keys, disabled accounts), each read by subject: the jobs'
   * events, most of the log, are none of the gateway's business. The two are independent, so
   * each keeps its own place.
   */
  const follow = (aggregate: 'session' | 'user') => {
    let read = 0;
    let caughtUp!: () => void;
    const ready = new Promise<void>((resolve) => (caughtUp = resolve));
    const following = supervise(
      `gateway-${aggregate}-events`,
      () =>
        ctx.events.follow(
          {
            fromSeq: read + 1,
            filter: Subjects.aggregateEvents(aggregate),
            signal: stopping.signal,
            onCaughtUp: () => caughtUp(),
            onStall: (at) => log.warn({ read: at }, 'gateway reader stalled; starting it again'),
          },
          (event) => {
            read = event.seq;
            onEvent(event);
          },
        ),
      stopping.signal,
      log,
    );
    return { ready: Promise.race([ready, following]), following };
  };
  const readers = [follow('user'), follow('session')];
  await Promise.all(readers.map((r) => r.ready));
  const port = await server.listen(opts.port, opts.host);
  log.info({ port, fingerprint: hostKey.fingerprint }, 'ssh gateway listening');
  return {
    port,
    hostKeyFingerprint: hostKey.fingerprint,
    stop: async () => {
      await server.close();
      stopping.abort();
      await Promise.all(readers.map((r) => r.following));
    },
  };
}
