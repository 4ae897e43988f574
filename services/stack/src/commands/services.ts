import type { Command } from 'commander';
import type { ServiceContext, Stoppable } from '@trainyard/service-kit';
import type { WorkerFlags } from '../worker-options.ts';
import { readStack } from '@trainyard/cli';

/**
 * The server side of the CLI is loaded when one of these commands runs, so that the client's
 * commands start without it.
 */
const server = async () => {
  const [
    api,
    builder,
    application,
    serviceKit,
    servers,
    projector,
    scheduler,
    watchdog,
    gateway,
    worker,
    env,
    stack,
    upCommand,
    options,
  ] = await Promise.all([
    import('@trainyard/api'),
    import('@trainyard/builder'),
    import('@trainyard/application'),
    import('@trainyard/service-kit'),
    import('@trainyard/servers'),
    import('@trainyard/projector'),
    import('@trainyard/scheduler'),
    import('@trainyard/watchdog'),
    import('@trainyard/gateway'),
    import('@trainyard/worker'),
    import('../env.ts'),
    import('../stack.ts'),
    import('../up.ts'),
    import('../worker-options.ts'),
  ]);
  return {
    ...api,
    ...builder,
    ...application,
    ...serviceKit,
    ...servers,
    ...projector,
    ...scheduler,
    ...watchdog,
    ...gateway,
    ...worker,
    ...env,
    ...stack,
    ...upCommand,
    ...options,
  };
};

/** Runs one service in this process until a signal stops it. */
async function runAlone(
  name: string,
  start: (ctx: ServiceContext) => Promise<Stoppable>,
): Promise<void> {
  const { serviceContext, stopOnSignals } = await server();
  const ctx = await serviceContext(name);
  const service = await start(ctx);
  stopOnSignals(
    {
      stop: async () => {
        await service.stop();
        await ctx.bus.close();
      },
    },
    ctx.log,
  );
}

/**
 * A worker whose key NATS no longer takes (it was revoked) cannot do anything: it says so and
 * exits, leaving its attempts to be run elsewhere.
 */
function stopOnClose(ctx: ServiceContext): void {
  void ctx.bus.nc.closed().then((err) => {
    if (!err) return;
    ctx.log.debug({ err }, 'NATS closed the connection');
    console.error(
      `error: NATS closed this worker’s connection and will not take its key (${err.message}): it was revoked, or this is not the server it enrolled with. Enrol again with a new token (--token).`,
    );
    process.exit(3);
  });
}

const ms = (v: string | undefined, fallback: number) => (v ? Number(v) : fallback);

/** `trainyard up` and one command per service. */
export function registerServiceCommands(program: Command): void {
  program
    .command('up')
    .description(
      'run the whole stack on this machine: NATS, Postgres, every service and a local worker',
    )
    .option('--demo', 'submit the example job and follow its logs')
    .option('--no-worker', 'run the control plane only; workers join with `trainyard worker`')
    .option('--simulate-gpus <shape>', 'give the local worker simulated GPUs, e.g. 2x24GiB')
    .option(
      '--runtime <kind>',
      'process: jobs run on this host; docker: jobs are built into images and run in containers (a private dockerd and registry start when TRAINYARD_DOCKER_HOST and TRAINYARD_REGISTRY are unset)',
      'process',
    )
    .option(
      '--listen <host>',
      'serve the API and NATS on this address (e.g. 0.0.0.0) for workers on other hosts',
    )
    .option('--tls-cert <file>', 'serve the API and NATS over TLS with this certificate (PEM)')
    .option('--tls-key <file>', "the certificate's private key (PEM)")
    .action(
      async (o: {
        demo?: boolean;
        worker: boolean;
        simulateGpus?: string;
        runtime: string;
        listen?: string;
        tlsCert?: string;
        tlsKey?: string;
      }) =>
        (await server()).up({
          demo: Boolean(o.demo),
          worker: o.worker,
          runtime: o.runtime,
          ...(o.simulateGpus && { simulateGpus: o.simulateGpus }),
          ...(o.listen && { listen: o.listen }),
          ...(o.tlsCert && { tlsCert: o.tlsCert }),
          ...(o.tlsKey && { tlsKey: o.tlsKey }),
        }),
    );

  const nats = program.command('nats').description('the NATS side of Trainyard');
  nats
    .command('setup')
    .description(
      'make or update the streams and buckets (with a login that may, such as control); services given TRAINYARD_MANAGE_STREAMS=false then leave them be',
    )
    .action(async () => {
      const {
        DEFAULT_BUILDER_OPTIONS,
        DEFAULT_SCHEDULER_OPTIONS,
        ensureServiceBuckets,
        openContext,
        serviceConfig,
      } = await server();
      const { reach } = await import('../connect.ts');
      const config = serviceConfig();
      const ctx = await reach('NATS', config.TRAINYARD_NATS_URL, 'TRAINYARD_NATS_URL', () =>
        openContext('nats-setup', config, { manage: true }),
      );
      try {
        await ensureServiceBuckets(ctx.bus.js, config.TRAINYARD_STREAM_REPLICAS, {
          leaseTtlMs: ms(process.env.TRAINYARD_LEASE_TTL_MS, DEFAULT_SCHEDULER_OPTIONS.leaseTtlMs),
          livenessTtlMs: ms(
            process.env.TRAINYARD_LIVENESS_TTL_MS,
            DEFAULT_BUILDER_OPTIONS.livenessTtlMs,
          ),
        });
      } finally {
        await ctx.bus.close();
      }
      console.log('the streams and buckets are ready');
    });

  nats
    .command('issuer')
    .description(
      'make the account nkey that signs the auth callout’s answers: its public half is nats-server’s TRAINYARD_AUTH_ISSUER, its seed `nats auth`’s TRAINYARD_AUTH_ISSUER_SEED',
    )
    .action(async () => {
      const issuer = (await server()).createAuthIssuer();
      console.log(`TRAINYARD_AUTH_ISSUER=${issuer.publicKey}`);
      console.log(`TRAINYARD_AUTH_ISSUER_SEED=${issuer.seed}`);
    });

  nats
    .command('auth')
    .description(
      'let enrolled workers log in to a nats-server 2.10 with fixed logins (infra/nats), each with its own key and permissions, and close their connections when revoked',
    )
    .action(async () => {
      const { runAuthCallout } = await import('../auth-callout.ts');
      await runAuthCallout(process.env);
    });

  program
    .command('api')
    .description('run the HTTP API (TRAINYARD_PORT, default 8080)')
    .action(async () => {
      const { apiSettings, database, startApi } = await server();
      await runAlone('api', async (ctx) => {
        const db = await database(ctx.config);
        const api = await startApi(ctx, db, {
          port: Number(process.env.TRAINYARD_PORT ?? 8080),
          host: process.env.TRAINYARD_HOST ?? '0.0.0.0',
          ...apiSettings(process.env),
        });
        if (api.generatedAdminPassword)
          console.log(`admin password (shown once): ${api.generatedAdminPassword}`);
        return { stop: async () => (await api.stop(), await db.destroy()) };
      });
    });

  program
    .command('scheduler')
    .description('run the scheduler (leader-elected; run several for standby)')
    .action(async () => {
      const { startScheduler, DEFAULT_SCHEDULER_OPTIONS } = await server();
      await runAlone('scheduler', (ctx) =>
        startScheduler(ctx, {
          ...DEFAULT_SCHEDULER_OPTIONS,
          leaseTtlMs: ms(process.env.TRAINYARD_LEASE_TTL_MS, 10_000),
        }),
      );
    });

  program
    .command('builder')
    .description('run the builder')
    .action(async () => {
      const { startBuilder, DEFAULT_BUILDER_OPTIONS } = await server();
      await runAlone('builder', (ctx) =>
        startBuilder(ctx, {
          ...DEFAULT_BUILDER_OPTIONS,
          name: process.env.TRAINYARD_BUILDER_NAME ?? DEFAULT_BUILDER_OPTIONS.name,
          livenessTtlMs: ms(
            process.env.TRAINYARD_LIVENESS_TTL_MS,
            DEFAULT_BUILDER_OPTIONS.livenessTtlMs,
          ),
        }),
      );
    });

  program
    .command('projector')
    .description('run the projector (event log -> Postgres read models)')
    .action(async () => {
      const { database, startProjector } = await server();
      await runAlone('projector', async (ctx) => {
        const db = await database(ctx.config);
        const projector = await startProjector(ctx, db);
        return { stop: async () => (await projector.stop(), await db.destroy()) };
      });
    });

  program
    .command('watchdog')
    .description('run the watchdog (marks silent workers lost)')
    .action(async () => {
      const { startWatchdog, DEFAULT_WATCHDOG_OPTIONS } = await server();
      await runAlone('watchdog', (ctx) =>
        startWatchdog(ctx, {
          ...DEFAULT_WATCHDOG_OPTIONS,
          heartbeatTimeoutMs: ms(
            process.env.TRAINYARD_HEARTBEAT_TIMEOUT_MS,
            DEFAULT_WATCHDOG_OPTIONS.heartbeatTimeoutMs,
          ),
        }),
      );
    });

  program
    .command('gateway')
    .description('run the SSH gateway (ssh into sessions; TRAINYARD_SSH_PORT, default 2222)')
    .action(async () => {
      const { startGateway } = await server();
      await runAlone('gateway', (ctx) =>
        startGateway(ctx, {
          port: ctx.config.TRAINYARD_SSH_PORT,
          host: ctx.config.TRAINYARD_SSH_LISTEN,
        }),
      );
    });

  program
    .command('worker')
    .description('run a worker daemon on this host')
    .option('--name <name>', 'worker id (default: local)')
    .option('--simulate-gpus <shape>', 'simulated GPUs for tests and benchmarks, e.g. 2x24GiB')
    .option(
      '--simulate-runtime',
      'run nothing: every attempt exits 0 at once (control-plane benchmarks)',
    )
    .option(
      '--runtime <kind>',
      'process: attempts run on this host; docker: in containers on TRAINYARD_DOCKER_HOST (or the local stack’s engine)',
      'process',
    )
    .option('--cpu-slots <n>', 'CPU-only job slots (default: CPU count)')
    .option(
      '--memory-gb <gb>',
      'memory placement shares out among this worker’s attempts (default: the host’s)',
    )
    .option('--sandbox <dir>', 'where attempts run')
    .option(
      '--address <host>',
      'where other workers reach this one, for gang jobs (MASTER_ADDR); or TRAINYARD_WORKER_ADDRESS (default: the host name)',
    )
    .option('--heartbeat-ms <ms>', 'heartbeat interval', '2000')
    .option(
      '--token <token>',
      'enrol with this one-time token from `trainyard worker token create` (or TRAINYARD_ENROL_TOKEN), at the API named by --api URL (or TRAINYARD_API_URL)',
    )
    .option('--key <file>', "this worker's key (default: TRAINYARD_HOME/secrets/worker-NAME.json)")
    .action(async (flags: WorkerFlags & { token?: string; key?: string }, cmd: Command) => {
      const { startWorker, stopOnSignals, workerOptions, workerContext, dockerSettings } =
        await server();
      const opts = await workerOptions(
        flags,
        dockerSettings(process.env, readStack() ?? undefined),
      );
      const api = cmd.optsWithGlobals<{ api?: string }>().api;
      const { ctx, enrolled } = await workerContext(opts.name, {
        ...flags,
        ...(api && { api }),
      });
      const worker = await startWorker(ctx, { ...opts, ownBucket: enrolled });
      stopOnClose(ctx);
      stopOnSignals(
        {
          stop: async () => {
            await worker.stop();
            await ctx.bus.close();
          },
        },
        ctx.log,
      );
    });
}
