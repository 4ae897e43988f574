import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Kysely } from 'kysely';
import { WorkerKeys } from '@trainyard/application';
import { archiveLimits } from '@trainyard/blobs';
import {
  ConfigError,
  natsUrlWithoutLogin,
  parseEnv,
  type ServiceContext,
} from '@trainyard/service-kit';
import type { Database } from '@trainyard/projections';
import { buildApp } from './app.ts';
import {
  CredentialStore,
  DEFAULT_TOKEN_TTL_S,
  loadTokenSecret,
  TokenIssuer,
  type Caller,
} from './auth.ts';
import { GatewayAccess } from './gateway.ts';
import { watchHeartbeats } from './heartbeats.ts';
import { passwordProblem } from './passwords.ts';
import { SessionConfigSchema, timerPolicy, type SessionConfig } from './session-config.ts';
import { SessionStore } from './sessions.ts';
import { LoginThrottle } from './throttle.ts';
import type { ApiDeps } from './deps.ts';
import { ApiError } from './errors.ts';
import { createMetrics } from './metrics.ts';
import { createUser } from './routes/users.ts';

export { buildApp } from './app.ts';
export { CredentialStore, TokenIssuer } from './auth.ts';
export type { ApiDeps } from './deps.ts';
export { createMetrics } from './metrics.ts';
export { STATUS_BY_CODE } from './errors.ts';
export type { JobView, SessionView, WorkerView } from './views.ts';
export { parseSshPublicKey, SshKeyProblem, type SshPublicKey } from './ssh-keys.ts';

export interface ApiOptions {
  port: number;
  host: string;
  jwtSecret?: string;
  adminPassword?: string;
  maxUploadBytes?: number;
  /** How long an access token lasts (`TRAINYARD_TOKEN_TTL_S`). */
  tokenTtlSeconds?: number;
  /** The NATS URL enrolled workers connect to (default: this API's own, without its login). */
  workerNatsUrl?: string;
  /** Serve HTTPS with this certificate and key (PEM files). */
  tls?: { cert: string; key: string };
  /**
   * Session timers, one-time SSH passwords and where the gateway is; default: read from the
   * environment (`TRAINYARD_SESSION_*`, `TRAINYARD_SSH_*`).
   */
  sessions?: SessionConfig;
  /**
   * The port the SSH gateway listens on, where the caller started it (default:
   * `TRAINYARD_SSH_PORT`). Its host is `TRAINYARD_SSH_HOST`, or the one clients reach the API at.
   */
  sshPort?: number;
}

export interface RunningApi {
  url: string;
  /** Set only when this start created the admin user with a generated password. */
  generatedAdminPassword: string | null;
  /** Mints a token in-process, for `trainyard up --demo` and tests. */
  issueToken(caller: Caller): Promise<string>;
  stop(): Promise<void>;
}

/**
 * Creates the `admin` user on first start, with `password` or a generated one. Returns the
 * password only when it was generated here, so that it can be shown once.
 */
export async function ensureAdmin(
  deps: Pick<ApiDeps, 'bus' | 'credentials'>,
  password: string | undefined,
): Promise<string | null> {
  if (await deps.credentials.exists('admin')) return null;
  const weak = password !== undefined && passwordProblem('admin', password);
  if (weak) throw new ConfigError(`TRAINYARD_ADMIN_PASSWORD is refused: ${weak}`);
  const chosen = password ?? randomBytes(18).toString('base64url');
  try {
    await createUser(deps, { username: 'admin', password: chosen, role: 'admin' }, null);
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 'USER_EXISTS')) throw err;
    await deps.credentials.set('admin', chosen, 'admin');
  }
  return password ? null : chosen;
}

/** Builds the API's dependencies from a service context and a database. */
export async function apiDeps(
  ctx: ServiceContext,
  db: Kysely<Database>,
  opts: ApiOptions,
): Promise<ApiDeps> {
  const replicas = ctx.config.TRAINYARD_STREAM_REPLICAS;
  const sessions = await SessionStore.open(ctx.bus.js, replicas);
  const secret = await loadTokenSecret(ctx.bus.js, opts.jwtSecret, replicas);
  const sessionConfig = opts.sessions ?? parseEnv(SessionConfigSchema);
  return {
    bus: ctx.bus,
    db,
    blobs: ctx.blobs,
    log: ctx.log,
    credentials: await CredentialStore.open(ctx.bus.js, replicas),
    workerKeys: await WorkerKeys.open(ctx.bus.js, replicas),
    workerNatsUrl:
      opts.workerNatsUrl ??
      ctx.config.TRAINYARD_WORKER_NATS_URL ??
      natsUrlWithoutLogin(ctx.config.TRAINYARD_NATS_URL),
    sessions,
    throttle: new LoginThrottle(),
    tokens: new TokenIssuer(secret, opts.tokenTtlSeconds ?? DEFAULT_TOKEN_TTL_S, (u, sid, at) =>
      sessions.isRevoked(u, sid, at),
    ),
    metrics: createMetrics(),
    maxUploadBytes: opts.maxUploadBytes ?? 2 * 1024 ** 3,
    archiveLimits: archiveLimits(ctx.config),
    readYourWritesTimeoutMs: 10_000,
    heartbeats: watchHeartbeats(ctx.bus, ctx.log),
    images: {
      enabled: ctx.config.TRAINYARD_REGISTRY !== undefined,
      ...(ctx.config.TRAINYARD_REGISTRY && { registry: ctx.config.TRAINYARD_REGISTRY }),
      ...(ctx.config.TRAINYARD_DEFAULT_IMAGE && {
        defaultImage: ctx.config.TRAINYARD_DEFAULT_IMAGE,
      }),
    },
    ssh: {
      host: sessionConfig.TRAINYARD_SSH_HOST ?? null,
      port: opts.sshPort ?? sessionConfig.TRAINYARD_SSH_PORT,
    },
    sessionTimers: timerPolicy(sessionConfig),
    gateway: await GatewayAccess.open(ctx.bus.js, {
      replicas,
      passwordTtlMs: sessionConfig.TRAINYARD_SSH_PASSWORD_TTL_S * 1000,
    }),
  };
}

/** Starts the HTTP API. */
export async function startApi(
  ctx: ServiceContext,
  db: Kysely<Database>,
  opts: ApiOptions,
): Promise<RunningApi> {
  const deps = await apiDeps(ctx, db, opts);
  const watchers = () => Promise.all([deps.sessions.stop(), deps.heartbeats.stop()]);
  let generatedAdminPassword: string | null;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let address: string;
  try {
    generatedAdminPassword = await ensureAdmin(deps, opts.adminPassword);
    app = await buildApp(
      deps,
      opts.tls
        ? { https: { cert: await readFile(opts.tls.cert), key: await readFile(opts.tls.key) } }
        : {},
    );
    address = await app.listen({ port: opts.port, host: opts.host });
  } catch (err) {
    await watchers();
    throw err;
  }
  ctx.log.info({ address }, 'api listening');
  return {
    url: address,
    generatedAdminPassword,
    issueToken: (caller) => deps.tokens.issue(caller),
    stop: async () => {
      await app.close();
      await watchers();
    },
  };
}
