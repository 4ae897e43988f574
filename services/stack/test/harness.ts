import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { inject } from 'vitest';
import type { JobView } from '@trainyard/api';
import { packDirectory } from '@trainyard/blobs';
import {
  DockerRuntime,
  ProcessRuntime,
  NoGpuInventory,
  type GpuInventory,
} from '@trainyard/runtime';
import { freePort } from '@trainyard/servers';
import { createTestDatabase, tempDir, waitFor, type TestDocker } from '@trainyard/testkit';
import { JobUsers } from '@trainyard/worker';
import { startStack, type Stack, type StackOptions } from '../src/index.ts';

export const ADMIN_PASSWORD = 'correct-horse-battery-1';

export interface TestStack {
  stack: Stack;
  url: string;
  /** Where the local worker keeps its attempts' sandboxes. */
  sandboxes: string;
  natsUrl: string;
  databaseUrl: string;
  home: string;
  /** The publish and subscribe violations its NATS logged so far, a line each. */
  violations(): string[];
  token(username?: string, password?: string): Promise<string>;
  http(path: string, init?: RequestInit & { token?: string | null }): Promise<Response>;
  /** Polls a job until `done(job)` holds. */
  waitForJob(
    id: string,
    token: string,
    done: (job: Job) => boolean,
    timeoutMs?: number,
  ): Promise<Job>;
  stop(): Promise<void>;
}

/** A job as `GET /v1/jobs/:id` answers it, attempts included. */
export type Job = JobView & { attempts: NonNullable<JobView['attempts']> };

/**
 * The whole stack in this process, on a NATS and a database of its own. Its NATS is the one `up`
 * starts, with a login per service and the local worker's own, unless `natsUrl` names another;
 * `stop` fails when a login was refused a subject (a service's permissions short of what it
 * does), unless the test provokes refusals itself (`expectViolations`).
 */
export async function startTestStack(
  opts: {
    localWorker?: boolean;
    heartbeatTimeoutMs?: number;
    without?: StackOptions['without'];
    /** Start a PostgreSQL of this stack's own, to stop and start it. */
    ownPostgres?: boolean;
    /** The test has logins refused on purpose: `stop` does not fail on NATS violations. */
    expectViolations?: boolean;
    inventory?: GpuInventory;
    /** Use this NATS (a cluster, or a server the test restarts) instead of one of its own. */
    natsUrl?: string;
    streamReplicas?: number;
    /** Sign tokens with this secret, so that a test can mint its own. */
    jwtSecret?: string;
    maxUploadBytes?: number;
    tokenTtlSeconds?: number;
    /** Serve NATS and the API on this address, over TLS with `tls`. */
    listen?: string;
    tls?: { cert: string; key: string };
    /** Run jobs in containers on the test run's Docker engine, its local worker too. */
    containers?: TestDocker;
    /** How often the watchdog looks at silent workers and session timers. */
    checkEveryMs?: number;
  } = {},
): Promise<TestStack> {
  const natsUrl = opts.natsUrl;
  const databaseUrl = opts.ownPostgres ? undefined : await createTestDatabase(inject('pgUrl'));
  const home = await tempDir('trainyard-home-');
  const sandboxes = await tempDir('trainyard-sandboxes-', '/var/tmp');
  const docker = opts.containers;
  const processes = docker ? null : new ProcessRuntime();
  const runtime =
    processes ??
    new DockerRuntime({ docker: docker!.docker, workerName: 'local', gpuDevices: 'none' });
  const endUser = processes ? (uid: number) => processes.endUser(uid) : async () => undefined;
  const users = process.getuid?.() === 0 ? new JobUsers(endUser) : undefined;
  const stack = await startStack({
    home: home.path,
    ...(natsUrl ? { natsUrl } : { natsPort: await freePort() }),
    ...(opts.streamReplicas && { streamReplicas: opts.streamReplicas }),
    ...(databaseUrl && { databaseUrl }),
    ...(opts.without && { without: opts.without }),
    fastPostgres: true,
    apiPort: 0,
    apiHost: '127.0.0.1',
    adminPassword: ADMIN_PASSWORD,
    ...(opts.jwtSecret && { jwtSecret: opts.jwtSecret }),
    ...(opts.maxUploadBytes && { maxUploadBytes: opts.maxUploadBytes }),
    ...(opts.tokenTtlSeconds && { tokenTtlSeconds: opts.tokenTtlSeconds }),
    ...(opts.listen && { listen: opts.listen }),
    ...(opts.tls && { tls: opts.tls }),
    ...(docker && { containers: { dockerHost: docker.host, registry: docker.registry } }),
    ...((opts.heartbeatTimeoutMs || opts.checkEveryMs) && {
      watchdog: {
        heartbeatTimeoutMs: opts.heartbeatTimeoutMs ?? 30_000,
        checkEveryMs: opts.checkEveryMs ?? 200,
      },
    }),
    gateway: { port: 0, keepaliveMs: 1_000 },
    worker:
      opts.localWorker === false
        ? null
        : {
            name: 'local',
            inventory: opts.inventory ?? new NoGpuInventory(),
            runtime,
            ...(users && { users }),
            cpuSlots: 2,
            sandboxRoot: sandboxes.path,
            heartbeatMs: 500,
            outputSyncMs: 300,
            killGraceMs: 2_000,
            timeLimitMarginMs: 5_000,
            version: 'test',
          },
  });
  const url = stack.api.url;
  const natsLog = join(home.path, 'nats', 'nats-server.log');
  const violations = () =>
    existsSync(natsLog)
      ? readFileSync(natsLog, 'utf8')
          .split('\n')
          .filter((l) => /(Publish|Subscription) Violation/.test(l))
      : [];
  const http = (path: string, init: RequestInit & { token?: string | null } = {}) => {
    const { token, ...rest } = init;
    const headers = new Headers(rest.headers);
    if (token) headers.set('authorization', `Bearer ${token}`);
    return fetch(`${url}${path}`, { ...rest, headers });
  };
  const token = async (username = 'admin', password = ADMIN_PASSWORD) => {
    const res = await http('/v1/auth/login', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username, password }),
    });
    if (!res.ok) throw new Error(`login failed: ${res.status}`);
    return ((await res.json()) as { token: string }).token;
  };
  return {
    stack,
    url,
    sandboxes: sandboxes.path,
    natsUrl: stack.natsUrl,
    databaseUrl: stack.databaseUrl,
    home: home.path,
    violations,
    token,
    http,
    waitForJob: async (id, tok, done, timeoutMs = 20_000) => {
      let seen = 'no answer';
      try {
        return await waitFor(
          `job ${id}`,
          async () => {
            const res = await http(`/v1/jobs/${id}`, { token: tok });
            if (!res.ok) {
              seen = `HTTP ${res.status}`;
              return undefined;
            }
            const job = (await res.json()) as Job;
            seen = `status ${job.status}, attempts ${JSON.stringify(job.attempts)}`;
            return done(job) ? job : undefined;
          },
          { timeoutMs, intervalMs: 50 },
        );
      } catch (err) {
        const events = await http(`/v1/jobs/${id}/events`, { token: tok })
          .then(async (r) => (await r.json()) as { type: string; seq: number }[])
          .then((es) => es.map((e) => `${e.seq}:${e.type}`).join(' '))
          .catch((e: unknown) => `unreadable (${(e as Error).message})`);
        throw new Error(`${(err as Error).message}; last seen ${seen}; log: ${events}`, {
          cause: err,
        });
      }
    },
    stop: async () => {
      await stack.stop();
      const refused = opts.expectViolations ? [] : violations();
      await home.remove();
      await sandboxes.remove();
      if (refused.length > 0) {
        throw new Error(`NATS refused a login what it did:\n${refused.slice(0, 20).join('\n')}`);
      }
    },
  };
}

/** Writes `files` into a fresh directory and packs it as a .tar.gz; returns the archive's bytes. */
export async function codeArchive(files: Record<string, string>): Promise<Buffer> {
  const dir = await tempDir('trainyard-code-');
  for (const [name, content] of Object.entries(files)) {
    await mkdir(join(dir.path, name, '..'), { recursive: true });
    await writeFile(join(dir.path, name), content, { mode: 0o755 });
  }
  const file = join(dir.path, '..', `${dir.path.split('/').pop()}.tar.gz`);
  await pipeline(packDirectory(dir.path), createWriteStream(file));
  const bytes = await readFile(file);
  await rm(file, { force: true });
  await dir.remove();
  return bytes;
}

/** Submits a job as multipart (spec + code) and returns the API's answer. */
export async function submit(
  t: TestStack,
  token: string,
  spec: object,
  code?: Buffer,
): Promise<Response> {
  const form = new FormData();
  form.set('spec', JSON.stringify(spec));
  if (code) form.set('code', new Blob([new Uint8Array(code)]), 'code.tar.gz');
  return t.http('/v1/jobs', { method: 'POST', body: form, token });
}

/** Makes a user as `admin`; its token. */
export async function addUser(
  t: TestStack,
  admin: string,
  username: string,
  password: string,
): Promise<string> {
  const made = await t.http('/v1/users', {
    method: 'POST',
    token: admin,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username, password, role: 'user' }),
  });
  if (made.status !== 201)
    throw new Error(`add user ${username}: ${made.status} ${await made.text()}`);
  return t.token(username, password);
}
