import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { isIP } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Kysely } from 'kysely';
import { startApi, type RunningApi } from '@trainyard/api';
import { DEFAULT_BUILDER_OPTIONS, startBuilder } from '@trainyard/builder';
import { WorkerKeys, ensureServiceBuckets } from '@trainyard/application';
import { ensureWorkerBucket, workerBucket } from '@trainyard/blobs';
import {
  embeddedPostgresDir,
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
  setLogDestination,
  stopOnSignals,
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
import { startWorker, type RunningWorker, type WorkerOptions } from '@trainyard/worker';
import pretty from 'pino-pretty';
import {
  LOCAL_WORKER_USER,
  LOOPBACK_TLS,
  natsLogins,
  natsUsers,
  signingKey,
  withLogin,
  type NatsLogins,
} from './stack-secrets.ts';
import { ApiClient } from './client.ts';
import { followToEnd, submitDirectory } from './commands/jobs.ts';
import { homeDirOf, stackFile, userStackFile, writePrivate, type StackInfo } from './config.ts';
import { reach, redactUrl } from './connect.ts';
import { CliError } from './errors.ts';
import { workerOptions } from './worker-options.ts';

export const EXAMPLE_DIR = resolve(
  fileURLToPath(new URL('../../../examples/hello', import.meta.url)),
);
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
}

/** Everything `trainyard up` runs, in one process. */
export interface Stack {
  ctx: ServiceContext;
  db: Kysely<Database>;
  api: RunningApi;
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
     * URL they share the one connection, as that URL's login is all there is.
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
    const api = await startApi(await serviceContextOf('api'), db, {
      port: opts.apiPort,
      host: opts.listen ?? opts.apiHost,
      ...(opts.tls && { tls: opts.tls }),
      ...(opts.adminPassword && { adminPassword: opts.adminPassword }),
      ...(opts.jwtSecret && { jwtSecret: opts.jwtSecret }),
      ...(opts.maxUploadBytes && { maxUploadBytes: opts.maxUploadBytes }),
      ...(opts.tokenTtlSeconds && { tokenTtlSeconds: opts.tokenTtlSeconds }),
      ...(workerNatsUrl && { workerNatsUrl }),
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

export interface UpOptions {
  demo: boolean;
  worker: boolean;
  simulateGpus?: string;
  listen?: string;
  tlsCert?: string;
  tlsKey?: string;
}

/** The certificate and key `up` serves TLS with: both, or neither. */
function tlsFiles(opts: UpOptions, env: NodeJS.ProcessEnv): { cert: string; key: string } | null {
  const cert = opts.tlsCert ?? env.TRAINYARD_TLS_CERT;
  const key = opts.tlsKey ?? env.TRAINYARD_TLS_KEY;
  if (!cert && !key) return null;
  if (!cert || !key) {
    throw new CliError(
      'TLS takes a certificate and its key: give both --tls-cert and --tls-key (or TRAINYARD_TLS_CERT and TRAINYARD_TLS_KEY)',
      'BAD_TLS',
    );
  }
  for (const file of [cert, key]) {
    if (!existsSync(file)) throw new CliError(`${file} does not exist`, 'BAD_TLS');
  }
  return { cert: resolve(cert), key: resolve(key) };
}

const isLoopbackHost = (host: string) =>
  host === 'localhost' || host === '::1' || host.startsWith('127.');

function banner(
  api: RunningApi,
  stack: Pick<Stack, 'natsUrl' | 'workerNatsUrl'>,
  home: string,
  worker: boolean,
  postgresDir: string | null,
) {
  const nats = redactUrl(stack.natsUrl);
  const joining = stack.workerNatsUrl
    ? `workers join with a token from \`trainyard worker token create\`: npx trainyard worker --name NAME --token TOKEN --api ${api.url}`
    : `workers join: TRAINYARD_NATS_URL=${nats} npx trainyard worker --name NAME`;
  const lines = [
    '',
    'Trainyard is up.',
    `  API        ${api.url}  (API docs: ${api.url}/docs)`,
    `  NATS       ${nats}  (${joining})`,
    `  worker     ${worker ? 'local (this process)' : 'none (--no-worker)'}`,
  ];
  if (postgresDir) lines.push(`  postgres   data in ${postgresDir}`);
  if (api.generatedAdminPassword) {
    lines.push(
      `  admin      password ${api.generatedAdminPassword}  (shown once; set TRAINYARD_ADMIN_PASSWORD to choose it)`,
    );
  }
  lines.push(
    `  next       npx trainyard login -u admin && npx trainyard submit examples/hello --command "python3 train.py" --follow`,
    '',
  );
  console.log(lines.join('\n'));
}

/** A port from the environment, or a clear error naming the variable. */
function portFrom(env: NodeJS.ProcessEnv, name: string, fallback?: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new CliError(`${name} must be a port number (0-65535), not "${raw}"`);
  return port;
}

/** The API's settings from the environment: secrets, the admin's password, the upload limit. */
export function apiSettings(env: NodeJS.ProcessEnv) {
  const count = (name: string) => {
    const raw = env[name];
    if (!raw) return undefined;
    const n = Number(raw);
    if (!Number.isInteger(n) || n <= 0)
      throw new CliError(`${name} must be a whole number above 0, not "${raw}"`);
    return n;
  };
  const maxUploadBytes = count('TRAINYARD_MAX_UPLOAD_BYTES');
  const tokenTtlSeconds = count('TRAINYARD_TOKEN_TTL_S');
  return {
    ...(env.TRAINYARD_ADMIN_PASSWORD && { adminPassword: env.TRAINYARD_ADMIN_PASSWORD }),
    ...(env.TRAINYARD_JWT_SECRET && { jwtSecret: env.TRAINYARD_JWT_SECRET }),
    ...(maxUploadBytes && { maxUploadBytes }),
    ...(tokenTtlSeconds && { tokenTtlSeconds }),
  };
}

/** Fails at once, naming the variable that moves it, when a port `up` needs is taken. */
async function ensureFree(port: number | undefined, name: string, host = '127.0.0.1') {
  if (!port || !(await portInUse(port))) return;
  throw new CliError(
    `port ${port} is already in use (on ${host}); another Trainyard or another program holds it. Stop it, or set ${name} to a free port, e.g. ${name}=${port + 1} npm run up`,
    'PORT_IN_USE',
  );
}

/**
 * Claims `home` for this process, so that two `up`s never share one NATS store: a lock file
 * made with O_EXCL, holding our pid. A lock whose process is gone is taken over.
 */
async function lockHome(home: string): Promise<() => Promise<void>> {
  await mkdir(home, { recursive: true });
  const lock = join(home, 'up.lock');
  for (let tries = 0; tries < 2; tries++) {
    try {
      await writeFile(lock, String(process.pid), { flag: 'wx', mode: 0o600 });
      return () => rm(lock, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number(await readFile(lock, 'utf8').catch(() => ''));
      if (Number.isInteger(holder) && holder > 0 && processRuns(holder)) {
        throw new CliError(
          `a Trainyard is already running from ${home} (pid ${holder}); stop it first, or set TRAINYARD_HOME to another directory for a second one`,
          'ALREADY_RUNNING',
        );
      }
      await rm(lock, { force: true });
    }
  }
  throw new CliError(
    `could not claim ${home}: another \`up\` is starting there`,
    'ALREADY_RUNNING',
  );
}

function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** `trainyard up`: the embedded stack, until Ctrl-C. */
export async function up(opts: UpOptions): Promise<void> {
  const env = process.env;
  if (process.stdout.isTTY && !env.TRAINYARD_LOG_FORMAT?.startsWith('json')) {
    setLogDestination(
      pretty({ colorize: true, translateTime: 'SYS:HH:MM:ss', ignore: 'pid,hostname' }),
    );
  }
  const apiPort = portFrom(env, 'TRAINYARD_PORT', 8080)!;
  const natsPort = portFrom(env, 'TRAINYARD_NATS_PORT');
  const home = homeDirOf();
  const tls = tlsFiles(opts, env);
  if (opts.listen && opts.listen !== 'localhost' && !isIP(opts.listen)) {
    throw new CliError(
      `--listen takes an address of this host (e.g. 0.0.0.0, or 10.0.0.5), not the name "${opts.listen}": Trainyard's own services reach NATS there`,
      'BAD_LISTEN',
    );
  }
  if (opts.listen && env.TRAINYARD_NATS_URL) {
    throw new CliError(
      '--listen serves the embedded NATS, and TRAINYARD_NATS_URL names another one: unset it, or leave out --listen',
      'BAD_LISTEN',
    );
  }
  const unlock = await lockHome(home);
  try {
    await ensureFree(apiPort, 'TRAINYARD_PORT', env.TRAINYARD_HOST);
    if (!env.TRAINYARD_NATS_URL) await ensureFree(natsPort, 'TRAINYARD_NATS_PORT');
  } catch (err) {
    await unlock();
    throw err;
  }
  const postgresDir = env.DATABASE_URL ? null : embeddedPostgresDir(home);
  const stack = await startStack({
    home,
    ...(env.TRAINYARD_NATS_URL && { natsUrl: env.TRAINYARD_NATS_URL }),
    ...(env.DATABASE_URL && { databaseUrl: env.DATABASE_URL }),
    ...(postgresDir && { postgresDir }),
    ...(natsPort !== undefined && { natsPort }),
    apiPort,
    apiHost: env.TRAINYARD_HOST ?? '127.0.0.1',
    ...(opts.listen && { listen: opts.listen }),
    ...(tls && { tls }),
    ...apiSettings(env),
    worker: opts.worker
      ? await workerOptions({
          name: 'local',
          ...(opts.simulateGpus && { simulateGpus: opts.simulateGpus }),
        })
      : null,
  }).catch(async (err: unknown) => {
    await unlock();
    throw err;
  });
  const info: StackInfo = {
    apiUrl: stack.api.url,
    natsUrl: stack.natsUrl,
    databaseUrl: stack.databaseUrl,
    publicKey: stack.publicKey,
    ...(tls && !env.TRAINYARD_NATS_URL && { natsTls: true }),
    pid: process.pid,
    home,
  };
  const files = [stackFile(), userStackFile()];
  for (const file of files) await writePrivate(file, JSON.stringify(info, null, 2));
  banner(stack.api, stack, home, opts.worker, postgresDir);
  if (opts.listen && !isLoopbackHost(opts.listen) && !tls) {
    console.log(
      `  warning    the API and NATS are served on ${opts.listen} without TLS: passwords, tokens and jobs cross the network in the clear. Give --tls-cert and --tls-key.\n`,
    );
  }
  stopOnSignals(
    {
      stop: async () => {
        await stack.stop();
        for (const file of files) {
          const held = await readFile(file, 'utf8').catch(() => '');
          if (held.includes(`"pid": ${process.pid},`)) await rm(file, { force: true });
        }
        await unlock();
        console.log('Trainyard stopped.');
      },
    },
    stack.ctx.log,
  );
  if (opts.demo) await demo(stack.api);
}

async function demo(api: RunningApi): Promise<void> {
  const client = new ApiClient(api.url, await api.issueToken({ username: 'admin', role: 'admin' }));
  const { id } = await submitDirectory(client, EXAMPLE_DIR, {
    command: 'python3 train.py',
    name: 'hello-demo',
  });
  console.log(`demo job ${id} submitted; following its log (Ctrl-C stops Trainyard)`);
  await followToEnd(client, id);
  console.log(`its outputs: npx trainyard outputs ${id}`);
}
