import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { setTimeout as delay } from 'node:timers/promises';
import { freePort } from '@trainyard/servers';
import { startStack, type Stack } from '@trainyard/stack';
import { tempDir, waitFor } from '@trainyard/testkit';
import { cpuMsOf } from './cpu.ts';
import { summary } from './stats.ts';

const exec = promisify(execFile);
const WORKER_HOST = resolve(fileURLToPath(new URL('./worker-host.ts', import.meta.url)));
const SSHD = '/usr/sbin/sshd';
const REAPED_MS = 300;

/** Where an `ssh` goes: the gateway (a session) or the machine's own sshd, the reference. */
interface Target {
  port: number;
  user: string;
  knownHosts: string;
  /** Where files land on the far side, relative to the login's directory or absolute. */
  dir: string;
  /** The CPU ms each part of the path has spent so far, by part. */
  cpu: Record<string, () => number>;
}

/** This process's own CPU ms, without its children's. */
const ownCpuMs = () => {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1000;
};

/** The `scp` and `ssh` clients this process ran and reaped. */
const clientsCpuMs = () => cpuMsOf(process.pid) - ownCpuMs();

/**
 * Bulk throughput and interactive latency through the SSH gateway, against the same client
 * talking to a loopback `sshd` in the same run: a `bytes` file sent with `scp` each way, and
 * `echoes` one-byte round trips through `cat` over one connection.
 *
 * The gateway is a long-running process, so what counts is its steady state: a first transfer
 * each way through each target warms both ends (it is reported on its own, as `first`), then
 * `rounds` rounds each send the file both ways through the direct sshd and then the gateway, so
 * the machine's own ups and downs fall on both alike; the medians count.
 */
export async function gatewayBench(bytes: number, echoes: number, rounds: number) {
  if (!existsSync(SSHD)) return { skipped: `no ${SSHD} here (Debian's openssh-server)` };
  const dir = await tempDir('trainyard-bench-ssh-');
  let sshd: Awaited<ReturnType<typeof startSshd>> | undefined;
  let gateway: Awaited<ReturnType<typeof gatewayTarget>> | undefined;
  try {
    const key = join(dir.path, 'id');
    await exec('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key]);
    const file = join(dir.path, 'payload');
    const payload = randomBytes(bytes);
    await writeFile(file, payload);
    sshd = await startSshd(dir.path, key);
    gateway = await gatewayTarget(dir.path, key);
    const direct = new Transfers(sshd.target, key, file, payload);
    const through = new Transfers(gateway.target, key, file, payload);
    const first = { direct: await direct.both(), gateway: await through.both() };
    for (let round = 0; round < rounds; round++) {
      await direct.both();
      await through.both();
    }
    const d = { ...direct.medians(), echoMs: await echo(sshd.target, key, echoes) };
    const g = { ...through.medians(), echoMs: await echo(gateway.target, key, echoes) };
    const cpu = { direct: direct.cpuMedians(), gateway: through.cpuMedians() };
    const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
    return {
      megabytes: Math.round(bytes / 1024 ** 2),
      echoes,
      rounds,
      first,
      direct: d,
      gateway: g,
      uploadRatio: ratio(g.uploadMBps, d.uploadMBps),
      downloadRatio: ratio(g.downloadMBps, d.downloadMBps),
      /** The median CPU ms each part of each path spent on one transfer each way. */
      cpuMsPerTransfer: cpu,
    };
  } finally {
    await gateway?.stop();
    sshd?.child.kill();
    await dir.remove();
  }
}

type Cpu = Record<string, number>;

/**
 * `scp` of one file to a target and back, timed, with the CPU each part of the path spent; each
 * copy back is checked byte for byte.
 */
class Transfers {
  private readonly up: number[] = [];
  private readonly down: number[] = [];
  private readonly upCpu: Cpu[] = [];
  private readonly downCpu: Cpu[] = [];

  constructor(
    private readonly target: Target,
    private readonly key: string,
    private readonly file: string,
    /** What `file` holds: each copy back is checked against it. */
    private readonly payload: Buffer,
  ) {}

  /** One transfer each way; their MB/s. */
  async both(): Promise<{ uploadMBps: number; downloadMBps: number }> {
    const remote = `${this.target.user}@127.0.0.1:${this.target.dir}/payload`;
    const scp = (from: string, to: string) =>
      timed(() =>
        exec('scp', [...options(this.target, this.key), '-P', String(this.target.port), from, to]),
      );
    const before = await this.cpu();
    const up = await scp(this.file, remote);
    const between = await this.cpu();
    const back = `${this.file}.back`;
    const down = await scp(remote, back);
    const after = await this.cpu();
    if (!(await readFile(back)).equals(this.payload)) throw new Error('scp changed the bytes');
    this.up.push(up);
    this.down.push(down);
    this.upCpu.push(spent(before, between));
    this.downCpu.push(spent(between, after));
    return { uploadMBps: this.mbps(up), downloadMBps: this.mbps(down) };
  }

  /** The median MB/s each way, leaving out the first transfer (the warm-up). */
  medians(): { uploadMBps: number; downloadMBps: number } {
    const median = (ms: number[]) => summary(ms.slice(1)).p50;
    return {
      uploadMBps: this.mbps(median(this.up)),
      downloadMBps: this.mbps(median(this.down)),
    };
  }

  /** The median CPU ms by part each way, leaving out the warm-up as `medians` does. */
  cpuMedians(): { up: Cpu; down: Cpu } {
    const median = (runs: Cpu[]) =>
      Object.fromEntries(
        Object.keys(runs[0] ?? {}).map((part) => [
          part,
          Math.round(summary(runs.slice(1).map((run) => run[part]!)).p50),
        ]),
      );
    return { up: median(this.upCpu), down: median(this.downCpu) };
  }

  /**
   * CPU ms by part, once the far end's processes for the last connection (sshd's child, the
   * worker's sftp-server) have had time to exit and be reaped: only then are they counted.
   */
  private async cpu(): Promise<Cpu> {
    await delay(REAPED_MS);
    return Object.fromEntries(Object.entries(this.target.cpu).map(([part, ms]) => [part, ms()]));
  }

  private mbps(ms: number): number {
    return Math.round((this.payload.length / 1024 ** 2 / (ms / 1000)) * 10) / 10;
  }
}

/** One byte through `cat` and back, `n` times in a row over one connection. */
async function echo(target: Target, key: string, n: number) {
  const child = spawn(
    'ssh',
    [...options(target, key), '-p', String(target.port), `${target.user}@127.0.0.1`, 'cat'],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  const times: number[] = [];
  try {
    await roundTrip(child); // the connection and `cat` are up
    for (let i = 0; i < n; i++) times.push(await roundTrip(child));
  } finally {
    child.kill();
  }
  return summary(times);
}

function roundTrip(child: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const timer = setTimeout(() => reject(new Error('no echo within 10 s')), 10_000);
    child.stdout!.once('data', () => {
      clearTimeout(timer);
      resolve(Number(process.hrtime.bigint() - started) / 1e6);
    });
    child.stdin!.write('x');
  });
}

function spent(before: Cpu, after: Cpu): Cpu {
  return Object.fromEntries(Object.keys(after).map((part) => [part, after[part]! - before[part]!]));
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = Date.now();
  await fn();
  return Date.now() - started;
}

function options(target: Target, key: string): string[] {
  return [
    '-F',
    '/dev/null',
    '-o',
    `UserKnownHostsFile=${target.knownHosts}`,
    '-o',
    'StrictHostKeyChecking=yes',
    '-o',
    'LogLevel=ERROR',
    '-o',
    'BatchMode=yes',
    '-o',
    'IdentitiesOnly=yes',
    '-i',
    key,
  ];
}

/** A loopback sshd of its own that lets `key` in as root, for the reference figures. */
async function startSshd(dir: string, key: string) {
  const hostKey = join(dir, 'sshd_host_key');
  await exec('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', hostKey]);
  await writeFile(join(dir, 'authorized_keys'), await readFile(`${key}.pub`));
  const port = await freePort();
  const config = join(dir, 'sshd_config');
  await writeFile(
    config,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${hostKey}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'StrictModes no',
      'UsePAM no',
      `PidFile ${join(dir, 'sshd.pid')}`,
      'Subsystem sftp internal-sftp',
      '',
    ].join('\n'),
  );
  // sshd wants its privilege separation directory, which Debian's service makes at boot.
  await mkdir('/run/sshd', { recursive: true, mode: 0o755 });
  const child = spawn(SSHD, ['-D', '-e', '-f', config], { stdio: 'ignore' });
  const knownHosts = join(dir, 'known_hosts_direct');
  const hostPub = (await readFile(`${hostKey}.pub`, 'utf8')).split(' ').slice(0, 2).join(' ');
  await writeFile(knownHosts, `[127.0.0.1]:${port} ${hostPub}\n`);
  const target: Target = {
    port,
    user: 'root',
    knownHosts,
    dir,
    cpu: { sshd: () => cpuMsOf(child.pid!), clients: clientsCpuMs },
  };
  child.once('error', () => undefined);
  await waitFor(
    'sshd',
    () =>
      exec('ssh', [...options(target, key), '-p', String(port), 'root@127.0.0.1', 'true']).then(
        () => true,
        () => undefined,
      ),
    { timeoutMs: 15_000, intervalMs: 200 },
  ).catch((err: unknown) => {
    child.kill();
    throw err;
  });
  return { child, target };
}

/**
 * A stack with a gateway, a worker in a process of its own (as a worker runs on a host of its
 * own), and a running session on it whose owner holds `key`.
 */
async function gatewayTarget(dir: string, key: string) {
  const home = await tempDir('trainyard-bench-gw-');
  const sandboxes = await tempDir('trainyard-bench-gw-sb-', '/var/tmp');
  const stack: Stack = await startStack({
    home: home.path,
    natsPort: 0,
    apiPort: 0,
    apiHost: '127.0.0.1',
    adminPassword: 'bench-keeper-pass',
    fastPostgres: true,
    gateway: { port: 0 },
    worker: null,
  });
  const worker = spawn(
    process.execPath,
    ['--import', 'tsx', WORKER_HOST, 'gw', '1', '1x80GiB', sandboxes.path],
    {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, TRAINYARD_NATS_URL: stack.natsUrl, TRAINYARD_LOG_LEVEL: 'warn' },
    },
  );
  const stop = async () => {
    if (worker.exitCode === null && worker.signalCode === null) {
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      worker.kill('SIGTERM');
      await exited;
    }
    await stack.stop();
    await sandboxes.remove();
    await home.remove();
  };
  try {
    const token = await stack.api.issueToken({ username: 'admin', role: 'admin' });
    const api = async (path: string, body?: object) => {
      const res = await fetch(`${stack.api.url}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          ...(body && { 'content-type': 'application/json' }),
        },
        ...(body && { body: JSON.stringify(body) }),
      });
      if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
      return (await res.json()) as Record<string, unknown>;
    };
    await api('/v1/me/ssh-keys', { publicKey: (await readFile(`${key}.pub`, 'utf8')).trim() });
    const { id } = (await api('/v1/sessions', { resources: { gpus: 1 } })) as { id: string };
    const connect = await waitFor(
      `session ${id} to run`,
      () => api(`/v1/sessions/${id}/connect`).catch(() => undefined),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    const knownHosts = join(dir, 'known_hosts_gateway');
    await writeFile(knownHosts, `[127.0.0.1]:${String(connect.port)} ${String(connect.hostKey)}\n`);
    const nats = stack.children[0];
    const target: Target = {
      port: Number(connect.port),
      user: id,
      knownHosts,
      dir: '.',
      cpu: {
        // The gateway runs in this process, beside the stack's idle services.
        gateway: ownCpuMs,
        worker: () => cpuMsOf(worker.pid!),
        natsServer: () => (nats ? cpuMsOf(nats.pid) : 0),
        clients: clientsCpuMs,
      },
    };
    return { target, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
