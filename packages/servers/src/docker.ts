import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { spawnLogged, stopChild, waitUntil, type ChildServer } from './child.ts';
import { ServerError } from './errors.ts';
import { freePort } from './ports.ts';

/** Where Debian's `docker.io` and `docker-registry` put their daemons. */
const DOCKERD = ['/usr/sbin/dockerd', '/usr/bin/dockerd'];
const REGISTRY = ['/usr/bin/docker-registry'];

const firstExisting = (paths: string[]) => paths.find((p) => existsSync(p)) ?? null;

/** Whether a private Docker engine can be started here: `dockerd` installed, and root. */
export function canStartDockerEngine(): boolean {
  return firstExisting(DOCKERD) !== null && process.getuid?.() === 0;
}

/** A GET over HTTP (on a unix socket when `socketPath` is given); resolves to its status. */
function httpStatus(url: string, socketPath?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { socketPath, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.end();
  });
}

/**
 * A Docker engine of its own (`dockerd`), its socket, images and containers under `dir`. It
 * makes no bridge and touches no iptables rule: its containers run with no network, or the
 * host's. `url` is the engine's address (`unix://…/docker.sock`).
 */
export async function startDockerEngine(opts: { dir: string }): Promise<ChildServer> {
  const dockerd = firstExisting(DOCKERD);
  if (!dockerd) {
    throw new ServerError(
      'NOT_INSTALLED',
      'dockerd is not installed: install Debian’s docker.io (apt-get install -y docker.io), or point Trainyard at a Docker engine with TRAINYARD_DOCKER_HOST',
    );
  }
  if (process.getuid?.() !== 0) {
    throw new ServerError(
      'START_FAILED',
      'a private Docker engine needs root: run as root, or point Trainyard at a Docker engine with TRAINYARD_DOCKER_HOST',
    );
  }
  await mkdir(opts.dir, { recursive: true, mode: 0o700 });
  const socket = join(opts.dir, 'docker.sock');
  const args = [
    '--host',
    `unix://${socket}`,
    '--data-root',
    join(opts.dir, 'data'),
    '--exec-root',
    join(opts.dir, 'exec'),
    '--pidfile',
    join(opts.dir, 'dockerd.pid'),
    '--iptables=false',
    '--ip-masq=false',
    '--bridge=none',
  ];
  const child = spawnLogged(dockerd, args, join(opts.dir, 'dockerd.log'), { cwd: opts.dir });
  try {
    await waitUntil(
      'dockerd',
      async () => (await httpStatus('http://docker/_ping', socket)) === 200,
      30_000,
      child,
    );
  } catch (err) {
    await stopChild(child, 'SIGKILL');
    throw new ServerError(
      'START_FAILED',
      `${(err as Error).message}; its log is ${join(opts.dir, 'dockerd.log')}`,
    );
  }
  return {
    pid: child.pid!,
    url: `unix://${socket}`,
    stop: () => stopChild(child),
    kill: () => stopChild(child, 'SIGKILL'),
  };
}

/**
 * An image registry on loopback (Debian's `docker-registry`), storing under `dir`. `url` is its
 * address as image references name it (`127.0.0.1:PORT`), which Docker trusts without TLS.
 */
export async function startRegistry(opts: { dir: string; port?: number }): Promise<ChildServer> {
  const registry = firstExisting(REGISTRY);
  if (!registry) {
    throw new ServerError(
      'NOT_INSTALLED',
      'docker-registry is not installed: install Debian’s docker-registry, or name a registry with TRAINYARD_REGISTRY',
    );
  }
  await mkdir(join(opts.dir, 'storage'), { recursive: true, mode: 0o700 });
  const port = opts.port ?? (await freePort());
  const config = join(opts.dir, 'config.yml');
  await writeFile(
    config,
    [
      'version: 0.1',
      'log:',
      '  level: warn',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${JSON.stringify(join(opts.dir, 'storage'))}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: 127.0.0.1:${port}`,
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
  const child = spawnLogged(registry, ['serve', config], join(opts.dir, 'registry.log'), {
    cwd: opts.dir,
  });
  try {
    await waitUntil(
      'docker-registry',
      async () => (await httpStatus(`http://127.0.0.1:${port}/v2/`)) === 200,
      15_000,
      child,
    );
  } catch (err) {
    await stopChild(child, 'SIGKILL');
    throw new ServerError('START_FAILED', (err as Error).message);
  }
  return {
    pid: child.pid!,
    url: `127.0.0.1:${port}`,
    stop: () => stopChild(child),
    kill: () => stopChild(child, 'SIGKILL'),
  };
}
