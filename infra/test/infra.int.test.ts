import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { nkeyAuthenticator } from '@nats-io/nats-core';
import { createUser, type KeyPair } from '@nats-io/nkeys';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { WorkerKeys } from '@trainyard/application';
import {
  createAuthIssuer,
  natsAccountsConfig,
  servicePasswordVariable,
  startAuthCallout,
  startNatsServer,
  type ChildServer,
} from '@trainyard/servers';
import {
  connectBus,
  connectNats,
  CONTROL_SERVICES,
  createLogger,
  workerInbox,
} from '@trainyard/service-kit';
import { clusterNatsServer, tempDir, waitFor } from '@trainyard/testkit';

const INFRA = resolve(fileURLToPath(new URL('..', import.meta.url)));
/** Every login of accounts.conf, the variable its password comes from, and a password. */
const LOGINS: [user: string, variable: string][] = [
  ['control', 'TRAINYARD_CONTROL_PASSWORD'],
  ...CONTROL_SERVICES.map((s): [string, string] => [s, servicePasswordVariable(s)]),
  ['auth', 'TRAINYARD_AUTH_NATS_PASSWORD'],
  ['sys', 'TRAINYARD_SYS_PASSWORD'],
];
const ISSUER = createAuthIssuer();
const SECRETS: Record<string, string> = {
  ...Object.fromEntries(
    LOGINS.map(([user, variable]) => [variable, `${user}-secret-${variable.length}`]),
  ),
  TRAINYARD_AUTH_ISSUER: ISSUER.publicKey,
};
/** accounts.conf asks an auth callout about logins it does not know: nats-server 2.10 or later. */
const NATS_SERVER = clusterNatsServer();
const withLogin = (url: string, user: string) =>
  url.replace('nats://', `nats://${user}:${SECRETS[LOGINS.find(([u]) => u === user)![1]]}@`);

let server: ChildServer;
let dir: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  dir = await tempDir('trainyard-infra-');
  server = await startNatsServer({
    dir: dir.path,
    ...(NATS_SERVER && { binary: NATS_SERVER }),
    args: ['-c', join(INFRA, 'nats', 'single.conf')],
    env: { ...process.env, ...SECRETS },
  });
});

afterAll(async () => {
  await server?.stop();
  await dir?.remove();
});

async function login(user: string, pass: string): Promise<'ok' | string> {
  try {
    const nc = await connect({ servers: server.url, user, pass, reconnect: false });
    await nc.flush();
    await nc.close();
    return 'ok';
  } catch (err) {
    return (err as Error).message;
  }
}

describe.skipIf(!NATS_SERVER)('the NATS configuration in infra/nats', () => {
  it('lets each user in with the password from the environment, and not with the literal $VAR', async () => {
    for (const [user, variable] of LOGINS) {
      expect(await login(user, SECRETS[variable]!), user).toBe('ok');
      expect(await login(user, `$${variable}`), user).toMatch(/authorization/i);
    }
    expect(await login('control', SECRETS.TRAINYARD_SYS_PASSWORD!)).toMatch(/authorization/i);
    expect(await login('worker', SECRETS.TRAINYARD_CONTROL_PASSWORD!)).toMatch(/authorization/i);
  });

  it('lets the control login make the streams with trainyard nats setup', async () => {
    const bin = join(INFRA, '..', 'services', 'cli', 'bin', 'trainyard.js');
    const url = server.url.replace(
      'nats://',
      `nats://control:${SECRETS.TRAINYARD_CONTROL_PASSWORD}@`,
    );
    const out = await new Promise<{ code: number; stdout: string }>((done) =>
      execFile(
        process.execPath,
        [bin, 'nats', 'setup'],
        { env: { ...process.env, TRAINYARD_NATS_URL: url }, timeout: 60_000 },
        (err, stdout) => done({ code: err ? 1 : 0, stdout }),
      ),
    );
    expect(out).toEqual({ code: 0, stdout: 'the streams and buckets are ready\n' });
    const nc = await connect({
      servers: server.url,
      user: 'projector',
      pass: SECRETS[servicePasswordVariable('projector')]!,
      inboxPrefix: '_INBOX_S.projector',
      reconnect: false,
    });
    try {
      const jsm = await jetstreamManager(nc, { timeout: 5_000 });
      expect((await jsm.streams.info('TY_EVENTS')).config.subjects).toEqual(['ty.ev.>']);
    } finally {
      await nc.close();
    }
  });

  it('lets an enrolled worker in with its own key, as itself only, until it is revoked', async () => {
    const control = await connectBus(withLogin(server.url, 'control'), 'infra-test', {
      manage: false,
    });
    const auth = await connectNats(withLogin(server.url, 'auth'), 'infra-test-auth');
    const system = await connectNats(withLogin(server.url, 'sys'), 'infra-test-sys');
    const keys = await WorkerKeys.open(control.js, 1);
    const key = createUser();
    const { token } = await keys.issue('w1', 600, 'admin');
    await keys.redeem(token, 'w1', key.getPublicKey());
    const callout = startAuthCallout({
      auth,
      system,
      issuerSeed: ISSUER.seed,
      keys,
      log: createLogger('infra-test'),
    });
    const asWorker = (k: KeyPair) =>
      connect({
        servers: server.url,
        authenticator: nkeyAuthenticator(k.getSeed()),
        inboxPrefix: workerInbox('w1'),
        reconnect: false,
      });
    try {
      let w1: Awaited<ReturnType<typeof connect>> | null = null;
      await waitFor('the callout to let w1 in', async () => {
        w1 = await asWorker(key).catch(() => null);
        return w1 !== null;
      });
      const nc = w1!;
      const beat = await jetstream(nc).publish('ty.hb.w1', JSON.stringify({ workerId: 'w1' }));
      expect(beat.stream).toBe('TY_HEARTBEATS');
      await expect(jetstream(nc, { timeout: 1_000 }).publish('ty.hb.w9', '{}')).rejects.toThrow();
      await expect(
        nc.request('$JS.API.STREAM.INFO.TY_EVENTS', '', { timeout: 1_000 }),
      ).rejects.toThrow();
      await expect(asWorker(createUser())).rejects.toThrow(/authorization/i);

      const closed = nc.closed();
      expect(await keys.revoke('w1', 'admin')).toBe(true);
      await waitFor('the revoked worker’s connection to be closed', () => nc.isClosed(), {
        timeoutMs: 5_000,
      });
      await closed;
      await expect(asWorker(key)).rejects.toThrow(/authorization/i);
    } finally {
      await callout.stop();
      await auth.close();
      await system.close();
      await control.close();
    }
  });

  it('is the file made from the permissions the embedded stack gives (npm run nats:accounts)', () => {
    expect(readFileSync(join(INFRA, 'nats', 'accounts.conf'), 'utf8')).toBe(natsAccountsConfig());
  });

  it('keeps every cluster node config valid as nats-server reads it', () => {
    for (const node of ['n1', 'n2', 'n3']) {
      const out = execFileSync(
        NATS_SERVER!,
        ['-t', '-c', join(INFRA, 'nats', 'cluster', `${node}.conf`)],
        { env: { ...process.env, ...SECRETS }, encoding: 'utf8', stdio: 'pipe' },
      );
      expect(out + '').not.toMatch(/error/i);
    }
  });
});

interface ComposeService {
  image?: string;
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }> | string[];
  healthcheck?: { test: string[] };
}

describe('the production compose file', () => {
  const text = readFileSync(join(INFRA, 'compose.yml'), 'utf8');
  const compose = parse(text, { merge: true }) as { services: Record<string, ComposeService> };

  it('gives no secret a default that would work', () => {
    for (const name of [
      ...LOGINS.map(([, variable]) => variable),
      'POSTGRES_PASSWORD',
      'MINIO_ROOT_PASSWORD',
      'TRAINYARD_JWT_SECRET',
      'TRAINYARD_AUTH_ISSUER',
      'TRAINYARD_AUTH_ISSUER_SEED',
    ]) {
      const uses = [...text.matchAll(new RegExp(`\\$\\{${name}(?![A-Z_])([^}]*)\\}`, 'g'))];
      expect(uses.length, name).toBeGreaterThan(0);
      for (const use of uses) expect(use[1], `${name} in ${use[0]}`).toMatch(/^:\?/);
    }
  });

  it('gives every service its own NATS login, and only nats-setup the control one', () => {
    for (const [name, s] of Object.entries(compose.services)) {
      const url = s.environment?.TRAINYARD_NATS_URL;
      if ((s as { command?: string[] }).command?.[0] === 'worker') {
        expect(url, `${name} logs in with the key it enrolled for`).toBeUndefined();
        continue;
      }
      if (!url) continue;
      const users = new Set([...url.matchAll(/nats:\/\/([^:]+):/g)].map((m) => m[1]));
      const command = (s as { command?: string[] }).command?.[0];
      const expected = name === 'nats-setup' || name === 'nats-auth' ? 'control' : command;
      expect([...users], name).toEqual([expected]);
    }
  });

  it('gives a worker host no secret of the control plane', () => {
    const workers = Object.entries(compose.services).filter(
      ([, s]) => (s as { command?: string[] }).command?.[0] === 'worker',
    );
    expect(workers.length).toBeGreaterThan(0);
    for (const [name, s] of workers) {
      const env = Object.keys(s.environment ?? {});
      expect(env, name).toContain('TRAINYARD_ENROL_TOKEN');
      for (const secret of ['DATABASE_URL', 'TRAINYARD_JWT_SECRET', 'TRAINYARD_NATS_URL']) {
        expect(env, `${name} has ${secret}`).not.toContain(secret);
      }
      expect(
        env.filter((v) => v.endsWith('_PASSWORD') || v.endsWith('_SEED')),
        name,
      ).toEqual([]);
    }
  });

  it('pins every image, checks the health of the servers, and waits for them', () => {
    const services = Object.entries(compose.services);
    for (const [name, s] of services) {
      expect(s.image, name).toMatch(/^[^:]+:(?!latest$)[\w.-]+$/);
    }
    for (const name of ['nats-1', 'nats-2', 'nats-3', 'postgres', 'minio', 'api'])
      expect(compose.services[name]!.healthcheck?.test.length, name).toBeGreaterThan(1);
    for (const [name, s] of services.filter(([, s]) => s.depends_on)) {
      expect(Array.isArray(s.depends_on), name).toBe(false);
      for (const [dep, { condition }] of Object.entries(
        s.depends_on as Record<string, { condition: string }>,
      )) {
        expect(condition, `${name} on ${dep}`).toBe(
          dep === 'nats-setup' ? 'service_completed_successfully' : 'service_healthy',
        );
      }
    }
  });

  it('is accepted by docker compose, when Docker Compose is installed', async (ctx) => {
    const compose = ['docker compose', 'docker-compose'].find((c) => {
      try {
        execFileSync('sh', ['-c', `${c} version`], { stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    });
    if (!compose) return ctx.skip('Docker Compose is not installed here');
    const run = (env: NodeJS.ProcessEnv) =>
      new Promise<{ code: number; stderr: string }>((done) =>
        execFile(
          'sh',
          ['-c', `${compose} -f compose.yml config -q`],
          { cwd: INFRA, env: { PATH: process.env.PATH, ...env } },
          (err, _out, stderr) => done({ code: err ? 1 : 0, stderr }),
        ),
      );
    const secrets = {
      ...SECRETS,
      POSTGRES_PASSWORD: 'p',
      MINIO_ROOT_PASSWORD: 'm',
      TRAINYARD_JWT_SECRET: 'j',
      TRAINYARD_AUTH_ISSUER_SEED: ISSUER.seed,
    };
    expect(await run(secrets)).toMatchObject({ code: 0 });
    const { POSTGRES_PASSWORD: _omitted, ...missing } = secrets;
    const refused = await run(missing);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('set POSTGRES_PASSWORD');
  });
});
