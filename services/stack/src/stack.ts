import { chmod, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { startApi, type RunningApi } from '@trainyard/api';
import { DEFAULT_BUILDER_OPTIONS, startBuilder } from '@trainyard/builder';
import { DEFAULT_BASE_ALIAS } from '@trainyard/runtime';
import { WorkerKeys, ensureServiceBuckets } from '@trainyard/application';
import { ensureWorkerBucket, workerBucket } from '@trainyard/blobs';
import {
  portInUse,
  startNatsServer,
  startPostgres,
  authorizeWorkers,
  type ChildServer,
  type NatsServer,
  urlHost,
} from '@trainyard/servers';
import {
  BaseConfigSchema,
  openContext,
  parseEnv,
  withDeadline,
  type ControlService,
  serviceInbox,
  workerInbox,
  type ServiceContext,
  type Stoppable,
} from '@trainyard/service-kit';
import { connectDb, migrate, type Database } from '@trainyard/projections';
import { startProjector } from '@trainyard/projector';
import {
  DEFAULT_SCHEDULER_OPTIONS,
  startScheduler,
  type SchedulerOptions,
} from '@trainyard/scheduler';
import { DEFAULT_WATCHDOG_OPTIONS, startWatchdog, type WatchdogOptions } from '@trainyard/watchdog';
import { startGateway, type RunningGateway } from '@trainyard/gateway';
import { startWorker, type RunningWorker, type WorkerOptions } from '@trainyard/worker';
import {
  LOCAL_WORKER_USER,
  LOOPBACK_TLS,
  natsLogins,
  natsUsers,
  signingKey,
  withLogin,
  type NatsLogins,
} from './stack-secrets.ts';
import { reach } from './connect.ts';

const DEFAULT_NATS_PORT = 4223;

export interface StackOptions {
  home: string;
  /** Use this NATS instead of starting one. */
  natsUrl?: string;
  /** Use this Postgres instead of starting one. */
  databaseUrl?: string;
  /** Where the embedded PostgreSQL keeps its files (default: `home/postgres`). */
  postgresDir?: string;
  /** The embedded NATS's port; without it 4223, or any free port when 4223 is taken. */
  natsPort?: number;
  apiPort: number;
  apiHost: string;
  adminPassword?: string;
  jwtSecret?: string;
  /** The largest code archive the API takes. */
  maxUploadBytes?: number;
  /** How long an access token lasts. */
  tokenTtlSeconds?: number;
  /** The local worker, or null for a control plane alone. */
  worker: WorkerOptions | null;
  scheduler?: SchedulerOptions;
  watchdog?: WatchdogOptions;
  /**
   * The SSH gateway into sessions: its port (0: any free one), on the API's address. Absent: no
   * gateway.
   */
  gateway?: { port: number; keepaliveMs?: number };
  /** Postgres without fsync, for tests and benchmarks. */
  fastPostgres?: boolean;
  /** Stream replicas: 3 on a NATS cluster. */
  streamReplicas?: number;
  /**
   * Serve NATS and the API on this address (e.g. 0.0.0.0) for workers on other hosts, instead
   * of loopback and `apiHost`.
   */
  listen?: string;
  /** Serve NATS and the API over TLS with this certificate and key (PEM files). */
  tls?: { cert: string; key: string };
  /** Services to leave out, to run them in processes of their own. */
  without?: readonly ('scheduler' | 'projector' | 'builder')[];
  /**
   * Run jobs in containers: the builder builds their images on this Docker engine and pushes
   * them to this registry, and a job that names no image gets the default base.
   */
  containers?: { dockerHost: string; registry: string };
}

/** Everything `trainyard up` runs, in one process. */
export interface Stack {
  ctx: ServiceContext;
  db: Kysely<Database>;
  api: RunningApi;
  /** The SSH gateway, when the stack runs one. */
  gateway: RunningGateway | null;
  worker: RunningWorker | null;
  /** The control plane's NATS URL, with its login when the stack started NATS itself. */
  natsUrl: string;
  /** The URL a remote worker connects to with its own key, when the stack started NATS. */
  workerNatsUrl: string | null;
  /** The public key of the key that signs the stack's events. */
  publicKey: string;
  databaseUrl: string;
  /** The NATS and Postgres servers this stack started (empty when given URLs). */
  children: ChildServer[];
  stop(): Promise<void>;
}

/** A service that has not stopped after this long is left behind, so that the rest can stop. */
const STOP_DEADLINE_MS = 30_000;

/**
 * Starts NATS and Postgres where no URL is given, then every service. When a step fails, what
 * had started is stopped again before the error is passed on.
 */
export async function startStack(opts: StackOptions): Promise<Stack> {
  await mkdir(opts.home, { recursive: true, mode: 0o711 });
  await chmod(opts.home, 0o711);
  const children: ChildServer[] = [];
  const services: { name: string; service: Stoppable }[] = [];
  const add = (name: string, service: Stoppable) => services.push({ name, service });
  let ctx: ServiceContext | null = null;
  const ownContexts: ServiceContext[] = [];
  let db: Kysely<Database> | null = null;
  const stop = async () => {
    for (const { name, service } of [...services].reverse()) {
      await withDeadline(`stopping the ${name}`, STOP_DEADLINE_MS, service.stop()).catch(
        (err: unknown) => ctx?.log.error({ err, service: name }, 'stop failed'),
      );
    }
    await db?.destroy();
    for (const own of ownContexts) await own.bus.close();
    await ctx?.bus.close();
    for (const c of [...children].reverse()) await c.stop();
  };
  try {
    let natsUrl = opts.natsUrl;
    let workerNatsUrl: string | null = null;
    let embeddedNats: NatsServer | null = null;
    let embeddedLogins: NatsLogins | null = null;
    if (!natsUrl) {
      const port =
        opts.natsPort ?? ((await portInUse(DEFAULT_NATS_PORT)) ? undefined : DEFAULT_NATS_PORT);
      const logins = await natsLogins(opts.home);
      embeddedLogins = logins;
      const nats = await startNatsServer({
        dir: join(opts.home, 'nats'),
        ...(port && { port }),
        ...(opts.listen && { host: opts.listen }),
        ...(opts.tls && { tls: opts.tls }),
        ...natsUsers(logins, opts.worker?.name ?? null),
      });
      children.push(nats);
      embeddedNats = nats;
      natsUrl = withLogin(nats.url, 'control', logins.control);
      const scheme = opts.tls ? 'tls' : 'nats';
      workerNatsUrl = `${scheme}://${urlHost(opts.listen ?? '127.0.0.1')}:${new URL(nats.url).port}`;
    }
    let databaseUrl = opts.databaseUrl;
    if (!databaseUrl) {
      const pg = await startPostgres({
        dir: opts.postgresDir ?? join(opts.home, 'postgres'),
        fast: opts.fastPostgres ?? false,
      });
      children.push(pg);
      databaseUrl = pg.url;
    }
    const config = parseEnv(BaseConfigSchema, {
      ...process.env,
      TRAINYARD_NATS_URL: natsUrl,
      DATABASE_URL: databaseUrl,
      ...(opts.streamReplicas && { TRAINYARD_STREAM_REPLICAS: String(opts.streamReplicas) }),
      ...(opts.containers && {
        TRAINYARD_DOCKER_HOST: opts.containers.dockerHost,
        TRAINYARD_REGISTRY: opts.containers.registry,
        TRAINYARD_DEFAULT_IMAGE: process.env.TRAINYARD_DEFAULT_IMAGE ?? DEFAULT_BASE_ALIAS,
      }),
    });
    const signer = await signingKey(opts.home, config.TRAINYARD_SIGNING_KEY);
    ctx = await reach('NATS', natsUrl, 'TRAINYARD_NATS_URL', () =>
      openContext('trainyard', config, {
        signer,
        ...(embeddedNats && opts.tls && { tls: LOOPBACK_TLS }),
      }),
    );
    const database = connectDb(databaseUrl);
    db = database;
    await reach('PostgreSQL', databaseUrl, 'DATABASE_URL', () => migrate(database));

    const control = ctx;
    /**
     * On the embedded NATS every service connects with a login of its own; on a NATS given by
     * URL they share the one connection, as that URL's login is all there is. Either way the
     * services of the control plane share one reader of the event log, the stack's.
     */
    const contextOf = async (
      service: ControlService | 'localWorker',
      user: string,
      inboxPrefix: string,
    ): Promise<ServiceContext> => {
      if (!embeddedNats || !embeddedLogins) return control;
      const own = await openContext(
        service === 'localWorker' ? 'worker' : service,
        {
          ...config,
          TRAINYARD_NATS_URL: withLogin(embeddedNats.url, user, embeddedLogins[service]),
        },
        {
          signer,
          manage: false,
          inboxPrefix,
          ...(service !== 'localWorker' && { events: control.events }),
          ...(service === 'localWorker' &&
            opts.worker && {
              blobReads: 'direct' as const,
              blobBuckets: [workerBucket(opts.worker.name)],
            }),
          ...(opts.tls && { tls: LOOPBACK_TLS }),
        },
      );
      ownContexts.push(own);
      return own;
    };
    const serviceContextOf = (service: ControlService) =>
      contextOf(service, service, serviceInbox(service));

    if (embeddedNats) {
      await ensureServiceBuckets(ctx.bus.js, config.TRAINYARD_STREAM_REPLICAS, {
        leaseTtlMs: (opts.scheduler ?? DEFAULT_SCHEDULER_OPTIONS).leaseTtlMs,
        livenessTtlMs: DEFAULT_BUILDER_OPTIONS.livenessTtlMs,
      });
      const keys = await WorkerKeys.open(ctx.bus.js, config.TRAINYARD_STREAM_REPLICAS);
      add(
        'worker logins',
        authorizeWorkers(keys, embeddedNats, ctx.log, {
          js: ctx.bus.js,
          replicas: config.TRAINYARD_STREAM_REPLICAS,
        }),
      );
      if (opts.worker) {
        await ensureWorkerBucket(ctx.bus.js, opts.worker.name, config.TRAINYARD_STREAM_REPLICAS);
      }
    }
    const without = new Set(opts.without ?? []);
    if (!without.has('projector')) {
      add('projector', await startProjector(await serviceContextOf('projector'), db));
    }
    if (!without.has('scheduler')) {
      add(
        'scheduler',
        await startScheduler(
          await serviceContextOf('scheduler'),
          opts.scheduler ?? DEFAULT_SCHEDULER_OPTIONS,
        ),
      );
    }
    if (!without.has('builder')) {
      add(
        'builder',
        await startBuilder(await serviceContextOf('builder'), DEFAULT_BUILDER_OPTIONS),
      );
    }
    add(
      'watchdog',
      await startWatchdog(
        await serviceContextOf('watchdog'),
        opts.watchdog ?? DEFAULT_WATCHDOG_OPTIONS,
      ),
    );
    const gateway = opts.gateway
      ? await startGateway(await serviceContextOf('gateway'), {
          port: opts.gateway.port,
          host: opts.listen ?? opts.apiHost,
          ...(opts.gateway.keepaliveMs !== undefined && { keepaliveMs: opts.gateway.keepaliveMs }),
        })
      : null;
    if (gateway) add('gateway', gateway);
    const api = await startApi(await serviceContextOf('api'), db, {
      port: opts.apiPort,
      host: opts.listen ?? opts.apiHost,
      ...(opts.tls && { tls: opts.tls }),
      ...(opts.adminPassword && { adminPassword: opts.adminPassword }),
      ...(opts.jwtSecret && { jwtSecret: opts.jwtSecret }),
      ...(opts.maxUploadBytes && { maxUploadBytes: opts.maxUploadBytes }),
      ...(opts.tokenTtlSeconds && { tokenTtlSeconds: opts.tokenTtlSeconds }),
      ...(workerNatsUrl && { workerNatsUrl }),
      ...(gateway && { sshPort: gateway.port }),
    });
    add('api', api);
    const worker = opts.worker
      ? await startWorker(
          await contextOf('localWorker', LOCAL_WORKER_USER, workerInbox(opts.worker.name)),
          { ...opts.worker, ownBucket: embeddedNats !== null },
        )
      : null;
    if (worker) add('worker', worker);
    return {
      ctx,
      db,
      api,
      gateway,
      worker,
      natsUrl,
      workerNatsUrl,
      databaseUrl,
      publicKey: signer.publicKey,
      children,
      stop,
    };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}
