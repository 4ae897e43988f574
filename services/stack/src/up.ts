/** `trainyard up`: the embedded stack on this machine, with its checks, banner and demo. */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isIP } from 'node:net';
import type { RunningApi } from '@trainyard/api';
import { embeddedPostgresDir, portInUse, type ChildServer } from '@trainyard/servers';
import { LOCAL_BASES } from '@trainyard/runtime';
import {
  BaseConfigSchema,
  parseEnv,
  setLogDestination,
  stopOnSignals,
} from '@trainyard/service-kit';
import pretty from 'pino-pretty';
import {
  ApiClient,
  followToEnd,
  submitDirectory,
  homeDirOf,
  stackFile,
  userStackFile,
  writePrivate,
  type StackInfo,
  CliError,
} from '@trainyard/cli';
import { redactUrl } from './connect.ts';
import { startStack, type Stack } from './stack.ts';
import { startContainers, type Containers } from './containers.ts';
import { dockerSettings, workerOptions } from './worker-options.ts';

/** The job `up --demo` submits. */
const EXAMPLE_DIR = resolve(fileURLToPath(new URL('../../../examples/hello', import.meta.url)));

export interface UpOptions {
  demo: boolean;
  worker: boolean;
  /** `docker`: jobs run in containers, built into images; `process` (the default): on the host. */
  runtime?: string;
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

/** The SSH gateway's port when TRAINYARD_SSH_PORT names none and it is free. */
const DEFAULT_SSH_PORT = 2222;

function banner(
  api: RunningApi,
  stack: Pick<Stack, 'natsUrl' | 'workerNatsUrl' | 'gateway'>,
  home: string,
  worker: boolean,
  postgresDir: string | null,
  containers: Containers | null,
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
    ...(stack.gateway
      ? [
          `  ssh        port ${stack.gateway.port}, host key ${stack.gateway.hostKeyFingerprint}  (npx trainyard session create, then npx trainyard ssh ID)`,
          ...(containers
            ? [
                '             sessions run on workers of the process runtime, not in containers yet: this stack has none',
              ]
            : []),
        ]
      : []),
    `  worker     ${worker ? `local (this process), ${containers ? 'jobs in containers' : 'jobs on this host'}` : 'none (--no-worker)'}`,
  ];
  if (containers) {
    const base = containers.baseImage;
    lines.push(
      `  docker     ${containers.dockerHost}; images pushed to ${containers.registry}`,
      `  base image ${base.ref} for "image": "python"${base.made ? ' (made now, from this host’s Python)' : ''}`,
      `             ${LOCAL_BASES.pytorch.ref} for "image": "pytorch", made from this host’s PyTorch on first use`,
    );
  }
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
  const sshPort = portFrom(env, 'TRAINYARD_SSH_PORT');
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
    await ensureFree(sshPort, 'TRAINYARD_SSH_PORT');
  } catch (err) {
    await unlock();
    throw err;
  }
  const postgresDir = env.DATABASE_URL ? null : embeddedPostgresDir(home);
  const runtime = opts.runtime ?? 'process';
  if (runtime !== 'process' && runtime !== 'docker') {
    await unlock();
    throw new CliError(`--runtime is process or docker, not "${runtime}"`, 'BAD_RUNTIME');
  }
  /** The Docker engine and registry `up` started, stopped after the stack. */
  const servers: ChildServer[] = [];
  const stopContainers = async () => {
    for (const child of servers.reverse()) await child.stop();
  };
  const started = async () => {
    const containers =
      runtime === 'docker' ? await startContainers(home, parseEnv(BaseConfigSchema, env)) : null;
    servers.push(...(containers?.children ?? []));
    const worker = opts.worker
      ? await workerOptions(
          {
            name: 'local',
            runtime,
            ...(opts.simulateGpus && { simulateGpus: opts.simulateGpus }),
          },
          containers ? dockerSettings(env, containers) : undefined,
        )
      : null;
    const stack = await startStack({
      home,
      ...(env.TRAINYARD_NATS_URL && { natsUrl: env.TRAINYARD_NATS_URL }),
      ...(env.DATABASE_URL && { databaseUrl: env.DATABASE_URL }),
      ...(postgresDir && { postgresDir }),
      ...(natsPort !== undefined && { natsPort }),
      apiPort,
      apiHost: env.TRAINYARD_HOST ?? '127.0.0.1',
      // The SSH gateway: TRAINYARD_SSH_PORT, else 2222, or any free port when 2222 is taken.
      gateway: {
        port: sshPort ?? ((await portInUse(DEFAULT_SSH_PORT)) ? 0 : DEFAULT_SSH_PORT),
      },
      ...(opts.listen && { listen: opts.listen }),
      ...(tls && { tls }),
      ...apiSettings(env),
      ...(containers && {
        containers: { dockerHost: containers.dockerHost, registry: containers.registry },
      }),
      worker,
    });
    return { stack, containers };
  };
  const { stack, containers } = await started().catch(async (err: unknown) => {
    await stopContainers();
    await unlock();
    throw err;
  });
  const info: StackInfo = {
    apiUrl: stack.api.url,
    natsUrl: stack.natsUrl,
    databaseUrl: stack.databaseUrl,
    publicKey: stack.publicKey,
    ...(tls && !env.TRAINYARD_NATS_URL && { natsTls: true }),
    ...(containers && { dockerHost: containers.dockerHost, registry: containers.registry }),
    pid: process.pid,
    home,
  };
  const files = [stackFile(), userStackFile()];
  for (const file of files) await writePrivate(file, JSON.stringify(info, null, 2));
  banner(stack.api, stack, home, opts.worker, postgresDir, containers);
  if (opts.listen && !isLoopbackHost(opts.listen) && !tls) {
    console.log(
      `  warning    the API and NATS are served on ${opts.listen} without TLS: passwords, tokens and jobs cross the network in the clear. Give --tls-cert and --tls-key.\n`,
    );
  }
  stopOnSignals(
    {
      stop: async () => {
        await stack.stop();
        await stopContainers();
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
