import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { connect as netConnect } from 'node:net';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '@trainyard/testkit';
import { startTestStack, type TestStack } from './harness.ts';
import { startEnrollingWorker, type ServiceProcess } from './processes.ts';

let t: TestStack;
let dir: Awaited<ReturnType<typeof tempDir>>;
let cert: string;
let admin: string;
let worker: ServiceProcess | undefined;

/** An HTTPS request that trusts the test's certificate only. */
function https(
  method: string,
  path: string,
  opts: { body?: unknown; token?: string } = {},
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${t.url}${path}`,
      {
        method,
        ca: readFileSync(cert),
        headers: {
          ...(opts.body !== undefined && { 'content-type': 'application/json' }),
          ...(opts.token && { authorization: `Bearer ${opts.token}` }),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: text ? (JSON.parse(text) as unknown) : null,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(opts.body === undefined ? undefined : JSON.stringify(opts.body));
  });
}

/** The first line a server sends on a plain TCP connection. */
function firstLine(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = netConnect(port, '127.0.0.1');
    let text = '';
    socket.on('data', (c) => {
      text += c.toString();
      if (text.includes('\r\n')) {
        socket.destroy();
        resolve(text.split('\r\n')[0]!);
      }
    });
    socket.on('error', reject);
  });
}

beforeAll(async () => {
  dir = await tempDir('trainyard-tls-');
  cert = join(dir.path, 'cert.pem');
  const key = join(dir.path, 'key.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
  t = await startTestStack({
    localWorker: false,
    listen: '127.0.0.1',
    tls: { cert, key },
  });
  admin = await t.stack.api.issueToken({ username: 'admin', role: 'admin' });
});

afterAll(async () => {
  await worker?.stop();
  await t?.stop();
  await dir?.remove();
});

describe('up --listen with TLS', () => {
  it('serves the API over HTTPS only', async () => {
    expect(t.url).toMatch(/^https:\/\//);
    expect((await https('GET', '/healthz')).status).toBe(200);
    await expect(fetch(t.url.replace('https://', 'http://') + '/healthz')).rejects.toThrow();
  });

  it('serves NATS with TLS required, to clients that trust its certificate', async () => {
    const port = Number(new URL(t.natsUrl.replace(/\/\/[^@]*@/, '//')).port);
    expect(await firstLine(port)).toContain('"tls_required":true');
    await expect(
      connect({ servers: `tls://127.0.0.1:${port}`, reconnect: false, timeout: 3_000 }),
    ).rejects.toThrow(/self[- ]signed|certificate/i);
  });

  it('enrols a worker over TLS and runs its job', async () => {
    const issued = await https('POST', '/v1/workers/tokens', {
      body: { name: 'far' },
      token: admin,
    });
    expect(issued.status).toBe(201);
    const { token } = issued.body as { token: string };
    worker = startEnrollingWorker('far', {
      token,
      apiUrl: t.url,
      dir: dir.path,
      env: { NODE_EXTRA_CA_CERTS: cert, TRAINYARD_NATS_CA: cert },
    });
    const kept = await waitFor(
      'the worker key',
      () => {
        try {
          return JSON.parse(
            readFileSync(join(dir.path, 'home', 'secrets', 'worker-far.json'), 'utf8'),
          ) as { natsUrl: string };
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 30_000 },
    );
    expect(kept.natsUrl).toMatch(/^tls:\/\/127\.0\.0\.1:\d+$/);
    const submitted = await https('POST', '/v1/jobs', {
      body: { name: 'over-tls', command: 'echo far away', resources: { gpus: 0 } },
      token: admin,
    });
    expect(submitted.status).toBe(202);
    const { id } = submitted.body as { id: string };
    const job = await waitFor(
      'the job to succeed on the worker',
      async () => {
        const res = await https('GET', `/v1/jobs/${id}`, { token: admin });
        const j = res.body as { status: string; attempts: { workerId: string }[] };
        return j.status === 'succeeded' ? j : undefined;
      },
      { timeoutMs: 45_000 },
    );
    expect(job.attempts[0]!.workerId).toBe('far');
  });
});
