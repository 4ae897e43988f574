import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Kysely } from 'kysely';
import { startApi, type RunningApi } from '@trainyard/api';
import { DEFAULT_BUILDER_OPTIONS, startBuilder } from '@trainyard/builder';
import {
  BaseConfigSchema,
  openContext,
  parseEnv,
  portInUse,
  startNatsServer,
  startPostgres,
  stopOnSignals,
  withDeadline,
  type ChildServer,
  type ServiceContext,
  type Stoppable,
} from '@trainyard/platform';
import { connectDb, migrate, type Database } from '@trainyard/projections';
import { startProjector } from '@trainyard/projector';
import {
  DEFAULT_SCHEDULER_OPTIONS,
  startScheduler,
  type SchedulerOptions,
} from '@trainyard/scheduler';
import { DEFAULT_WATCHDOG_OPTIONS, startWatchdog, type WatchdogOptions } from '@trainyard/watchdog';
import { startWorker, type RunningWorker, type WorkerOptions } from '@trainyard/worker';
import { ApiClient } from './client.ts';
import { followToEnd, submitDirectory } from './commands/jobs.ts';
import { homeDirOf, stackFile, type StackInfo } from './config.ts';
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
  natsPort?: number;
  apiPort: number;
  apiHost: string;
  adminPassword?: string;
  jwtSecret?: string;
  /** The local worker, or null for a control plane alone. */
  worker: WorkerOptions | null;
  scheduler?: SchedulerOptions;
  watchdog?: WatchdogOptions;
  /** Postgres without fsync, for tests and benchmarks. */
  fastPostgres?: boolean;
  /** Stream replicas: 3 on a NATS cluster. */
  streamReplicas?: number;
  /** Services to leave out, to run them in processes of their own. */
  without?: readonly ('scheduler' | 'projector' | 'builder')[];
}

/** Everything `trainyard up` runs, in one process. */
export interface Stack {
  ctx: ServiceContext;
  db: Kysely<Database>;
  api: RunningApi;
  worker: RunningWorker | null;
  natsUrl: string;
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
  await mkdir(opts.home, { recursive: true });
  const children: ChildServer[] = [];
  const services: { name: string; service: Stoppable }[] = [];
  const add = (name: string, service: Stoppable) => services.push({ name, service });
  let ctx: ServiceContext | null = null;
  let db: Kysely<Database> | null = null;
  const stop = async () => {
    for (const { name, service } of [...services].reverse()) {
      await withDeadline(`stopping the ${name}`, STOP_DEADLINE_MS, service.stop()).catch(
        (err: unknown) => ctx?.log.error({ err, service: name }, 'stop failed'),
      );
    }
    await db?.destroy();
    await ctx?.bus.close();
    for (const c of [...children].reverse()) await c.stop();
  };
  try {
    let natsUrl = opts.natsUrl;
    if (!natsUrl) {
      const wanted = opts.natsPort ?? DEFAULT_NATS_PORT;
      const port = wanted && !(await portInUse(wanted)) ? wanted : undefined;
      const nats = await startNatsServer({ dir: join(opts.home, 'nats'), ...(port && { port }) });
      children.push(nats);
      natsUrl = nats.url;
    }
    let databaseUrl = opts.databaseUrl;
    if (!databaseUrl) {
      const pg = await startPostgres({
        dir: join(opts.home, 'postgres'),
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
    ctx = await openContext('trainyard', config);
    db = connectDb(databaseUrl);
    await migrate(db);

    const without = new Set(opts.without ?? []);
    if (!without.has('projector')) add('projector', await startProjector(ctx, db));
    if (!without.has('scheduler')) {
      add('scheduler', await startScheduler(ctx, opts.scheduler ?? DEFAULT_SCHEDULER_OPTIONS));
    }
    if (!without.has('builder')) add('builder', await startBuilder(ctx, DEFAULT_BUILDER_OPTIONS));
    add('watchdog', await startWatchdog(ctx, opts.watchdog ?? DEFAULT_WATCHDOG_OPTIONS));
    const api = await startApi(ctx, db, {
      port: opts.apiPort,
      host: opts.apiHost,
      ...(opts.adminPassword && { adminPassword: opts.adminPassword }),
      ...(opts.jwtSecret && { jwtSecret: opts.jwtSecret }),
    });
    add('api', api);
    const worker = opts.worker ? await startWorker(ctx, opts.worker) : null;
    if (worker) add('worker', worker);
    return { ctx, db, api, worker, natsUrl, databaseUrl, children, stop };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}

export interface UpOptions {
  demo: boolean;
  worker: boolean;
  simulateGpus?: string;
}

function banner(api: RunningApi, natsUrl: string, worker: boolean) {
  const lines = [
    '',
    'Trainyard is up.',
    `  API        ${api.url}  (OpenAPI: ${api.url}/docs)`,
    `  NATS       ${natsUrl}  (workers join: TRAINYARD_NATS_URL=${natsUrl} npx trainyard worker --name NAME)`,
    `  worker     ${worker ? 'local (this process)' : 'none (--no-worker)'}`,
  ];
  if (api.generatedAdminPassword) {
    lines.push(
      `  admin      password ${api.generatedAdminPassword}  (shown once; set TRAINYARD_ADMIN_PASSWORD to choose it)`,
    );
  }
  lines.push(
    `  next       npx trainyard login -u admin && npx trainyard submit examples/hello --command "python3 train.py" -f`,
    '',
  );
  console.log(lines.join('\n'));
}

/** `trainyard up`: the embedded stack, until Ctrl-C. */
export async function up(opts: UpOptions): Promise<void> {
  const env = process.env;
  const stack = await startStack({
    home: homeDirOf(),
    ...(env.TRAINYARD_NATS_URL && { natsUrl: env.TRAINYARD_NATS_URL }),
    ...(env.DATABASE_URL && { databaseUrl: env.DATABASE_URL }),
    ...(env.TRAINYARD_NATS_PORT && { natsPort: Number(env.TRAINYARD_NATS_PORT) }),
    apiPort: Number(env.TRAINYARD_PORT ?? 8080),
    apiHost: env.TRAINYARD_HOST ?? '127.0.0.1',
    ...(env.TRAINYARD_ADMIN_PASSWORD && { adminPassword: env.TRAINYARD_ADMIN_PASSWORD }),
    ...(env.TRAINYARD_JWT_SECRET && { jwtSecret: env.TRAINYARD_JWT_SECRET }),
    worker: opts.worker
      ? await workerOptions({
          name: 'local',
          ...(opts.simulateGpus && { simulateGpus: opts.simulateGpus }),
        })
      : null,
  });
  const info: StackInfo = {
    apiUrl: stack.api.url,
    natsUrl: stack.natsUrl,
    databaseUrl: stack.databaseUrl,
    pid: process.pid,
  };
  await writeFile(stackFile(), JSON.stringify(info, null, 2));
  banner(stack.api, stack.natsUrl, opts.worker);
  stopOnSignals(
    {
      stop: async () => {
        await stack.stop();
        await rm(stackFile(), { force: true });
      },
    },
    stack.ctx.log,
  );
  if (opts.demo) await demo(stack.api);
}

async function demo(api: RunningApi): Promise<void> {
  const client = new ApiClient(api.url, await api.issueToken({ username: 'admin', role: 'admin' }));
  const id = await submitDirectory(client, EXAMPLE_DIR, {
    command: 'python3 train.py',
    name: 'hello-demo',
  });
  console.log(`demo job ${id} submitted; following its log (Ctrl-C stops Trainyard)`);
  const job = await followToEnd(client, id);
  console.log(`demo job ${id} ${job.status}; its outputs: npx trainyard outputs ${id}`);
}
