import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  CONTROL_SERVICES,
  natsAccountsConfig,
  servicePasswordVariable,
  startNatsServer,
  type ChildServer,
} from '@trainyard/platform';
import { tempDir } from '@trainyard/testkit';

const INFRA = resolve(fileURLToPath(new URL('..', import.meta.url)));
/** Every login of accounts.conf, the variable its password comes from, and a password. */
const LOGINS: [user: string, variable: string][] = [
  ['control', 'TRAINYARD_CONTROL_PASSWORD'],
  ...CONTROL_SERVICES.map((s): [string, string] => [s, servicePasswordVariable(s)]),
  ['worker', 'TRAINYARD_WORKER_PASSWORD'],
  ['sys', 'TRAINYARD_SYS_PASSWORD'],
];
const SECRETS: Record<string, string> = Object.fromEntries(
  LOGINS.map(([user, variable]) => [variable, `${user}-secret-${variable.length}`]),
);

let server: ChildServer;
let dir: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  dir = await tempDir('trainyard-infra-');
  server = await startNatsServer({
    dir: dir.path,
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

describe('the NATS configuration in infra/nats', () => {
  it('lets each user in with the password from the environment, and not with the literal $VAR', async () => {
    for (const [user, variable] of LOGINS) {
      expect(await login(user, SECRETS[variable]!), user).toBe('ok');
      expect(await login(user, `$${variable}`), user).toMatch(/authorization/i);
    }
    expect(await login('control', SECRETS.TRAINYARD_WORKER_PASSWORD!)).toMatch(/authorization/i);
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

  it('is the file made from the permissions the embedded stack gives (npm run nats:accounts)', () => {
    expect(readFileSync(join(INFRA, 'nats', 'accounts.conf'), 'utf8')).toBe(natsAccountsConfig());
  });

  it('keeps every cluster node config valid as nats-server reads it', () => {
    for (const node of ['n1', 'n2', 'n3']) {
      const out = execFileSync(
        'nats-server',
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
    ]) {
      const uses = [...text.matchAll(new RegExp(`\\$\\{${name}([^}]*)\\}`, 'g'))];
      expect(uses.length, name).toBeGreaterThan(0);
      for (const use of uses) expect(use[1], `${name} in ${use[0]}`).toMatch(/^:\?/);
    }
  });

  it('gives every service its own NATS login, and only nats-setup the control one', () => {
    for (const [name, s] of Object.entries(compose.services)) {
      const url = s.environment?.TRAINYARD_NATS_URL;
      if (!url) continue;
      const users = new Set([...url.matchAll(/nats:\/\/([^:]+):/g)].map((m) => m[1]));
      const command = (s as { command?: string[] }).command?.[0];
      const expected = name === 'nats-setup' ? 'control' : command;
      expect([...users], name).toEqual([expected]);
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
    };
    expect(await run(secrets)).toMatchObject({ code: 0 });
    const { POSTGRES_PASSWORD: _omitted, ...missing } = secrets;
    const refused = await run(missing);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('set POSTGRES_PASSWORD');
  });
});
