import { createHash, timingSafeEqual } from 'node:crypto';
import { Kvm, type KV } from '@nats-io/kv';
import { currentAttempt, DomainError } from '@trainyard/domain';
import {
  loadJob,
  runJobCommand,
  runSessionCommand,
  SSH_PASSWORDS_BUCKET,
  type StoredSshPassword,
} from '@trainyard/application';
import { JOB_ID_PATTERN, Subjects, type StoredEvent } from '@trainyard/events';
import { supervise, type ServiceContext } from '@trainyard/service-kit';
import { TunnelClient } from '@trainyard/tunnel';
import { Directory } from './directory.ts';
import { loadHostKey } from './host-key.ts';
import type { LoginLimits } from './rate-limit.ts';
import { SshGateway } from './ssh-server.ts';
import type { LoginAttempt, LoginDecision, SessionRoute } from './types.ts';

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

/** Who may log in as a name, and where its channels go while it runs. */
interface Target {
  owner: string;
  route: SessionRoute | null;
}

const CROWD_LOG_EVERY_MS = 60_000;

const refused = (reason: string, user: string | null = null): LoginDecision => ({
  ok: false,
  user,
  reason,
});

/**
 * The SSH gateway: an SSH server whose username names a session, or a running job (a shell
 * beside its attempt). It logs users in by a one-time password the API issued (kept as a hash
 * in KV, deleted as it is used) or a public key they registered (from the log), records every
 * finished login on the session or job, carries each channel to the worker that holds the
 * session or runs the job over the tunnel, and ends a session's connections when it stops or
 * moves (a job's worker closes the shells beside it as its attempt ends).
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

  /**
   * Whose `name` is and where its channels go: a session, from the directory; or a job (a shell
   * beside its running attempt), read from the log at login. `route` is null while it does not
   * run; the whole is null when there is no such session or job.
   */
  async function targetOf(name: string): Promise<Target | null> {
    if (JOB_ID_PATTERN.test(name)) {
      const { state } = await loadJob(ctx.bus.store, name);
      if (state.status === 'none') return null;
      const attempt = currentAttempt(state);
      const runs = state.status === 'running' && attempt?.status === 'running';
      const route =
        runs && attempt.workerId ? { workerId: attempt.workerId, runId: attempt.id } : null;
      return { owner: state.owner, route: route && { sessionId: name, ...route } };
    }
    const found = directory.session(name);
    if (!found) return null;
    const { state, run } = found;
    const runs = run && state.status === 'running';
    const route = runs ? { sessionId: name, workerId: run.workerId, runId: run.id } : null;
    return { owner: state.owner, route };
  }

  async function passwordLogin(name: string, password: string): Promise<LoginDecision> {
    const target = await targetOf(name);
    if (!target) return refused('noSuchSession');
    const { owner, route } = target;
    if (!route) return refused('notRunning');
    const entry = await (await passwordBucket()).get(name).catch(() => null);
    if (!entry || entry.operation !== 'PUT') return refused('badPassword');
    const stored = entry.json<StoredSshPassword>();
    const given = createHash('sha256').update(password).digest();
    const kept = Buffer.from(stored.sha256, 'hex');
    if (kept.length !== given.length || !timingSafeEqual(kept, given)) {
      return refused('badPassword');
    }
    if (Date.parse(stored.expiresAt) <= Date.now()) return refused('passwordExpired', owner);
    if (stored.runId !== route.runId) return refused('passwordExpired', owner);
    // Used once: only the login that deletes this very revision gets in.
    try {
      await (await passwordBucket()).delete(name, { previousSeq: entry.revision });
    } catch {
      return refused('passwordUsed', owner);
    }
    if (directory.disabled(owner)) return refused('accountDisabled', owner);
    return { ok: true, user: owner, route };
  }

  async function keyLogin(name: string, key: { data: Buffer }): Promise<LoginDecision> {
    // A key no one registered is refused before the log is read: key queries are not counted.
    const owner = directory.keyOwner(key.data);
    if (!owner) return refused('unknownKey');
    const target = await targetOf(name);
    if (!target) return refused('noSuchSession', owner);
    if (owner !== target.owner) return refused('notYours', owner);
    if (directory.disabled(owner)) return refused('accountDisabled', owner);
    if (!target.route) return refused('notRunning', owner);
    return { ok: true, user: owner, route: target.route };
  }

  /** Connections dropped for their source's crowd, said at most once a minute. */
  let crowded = { count: 0, saidAt: 0 };
  function onCrowded(source: string): void {
    crowded.count++;
    if (Date.now() - crowded.saidAt < CROWD_LOG_EVERY_MS) return;
    log.warn(
      { source, dropped: crowded.count },
      'ssh connections dropped: too many logging in at once from one source',
    );
    crowded = { count: 0, saidAt: Date.now() };
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
    const login = {
      type: 'RecordLogin' as const,
      user: attempt.user,
      method: attempt.method,
      accepted: attempt.accepted,
      ...(attempt.reason !== undefined && { reason: attempt.reason }),
      source: attempt.source.slice(0, 64),
    };
    const meta = { actor: { kind: 'service' as const, id: ctx.instanceId }, now: new Date() };
    const name = attempt.session;
    // A job that does not exist refuses the record (JOB_NOT_FOUND): nothing is appended.
    const recorded = JOB_ID_PATTERN.test(name)
      ? runJobCommand(ctx.bus.store, name, login, meta)
      : directory.session(name)
        ? runSessionCommand(ctx.bus.store, name, login, meta)
        : null;
    recorded?.catch((err: unknown) => {
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
    onCrowded,
    ...(opts.limits && { limits: opts.limits }),
  });

  const stopping = new AbortController();
  const onEvent = (event: StoredEvent) => {
    const ending = directory.apply(event);
    if (!ending) return;
    if ('user' in ending) {
      const closed = server.closeUser(ending.user, ending.message);
      if (closed > 0)
        log.info({ user: ending.user, closed }, 'a disabled user’s connections ended');
      return;
    }
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
