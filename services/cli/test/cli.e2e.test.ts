import { execFile } from 'node:child_process';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '@trainyard/testkit';
import { ADMIN_PASSWORD, startTestStack, type TestStack } from './harness.ts';

const BIN = resolve(fileURLToPath(new URL('../bin/trainyard.js', import.meta.url)));
let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;

function cli(
  args: string[],
  timeoutMs = 30_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      {
        timeout: timeoutMs,
        env: {
          ...process.env,
          TRAINYARD_API_URL: t.url,
          TRAINYARD_CREDENTIALS: join(work.path, 'credentials.json'),
          TRAINYARD_NATS_URL: t.natsUrl,
          DATABASE_URL: t.databaseUrl,
          TRAINYARD_HOME: join(work.path, 'home'),
        },
      },
      (err, stdout, stderr) =>
        done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

beforeAll(async () => {
  t = await startTestStack();
  work = await tempDir('trainyard-cli-');
  const code = join(work.path, 'project');
  await mkdir(code, { recursive: true });
  await writeFile(
    join(code, 'train.py'),
    'import os\nprint("hello from", os.environ["TRAINYARD_JOB_ID"], flush=True)\nopen(os.path.join(os.environ["TRAINYARD_OUTPUT_DIR"], "result.txt"), "w").write("42")\n',
  );
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('the trainyard CLI against a running stack', () => {
  let jobId = '';

  it('logs in and saves a token', async () => {
    const bad = await cli(['login', '-u', 'admin', '-p', 'wrong']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('wrong username or password');
    const ok = await cli(['login', '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(ok.stdout).toContain('logged in');
    const saved = JSON.parse(await readFile(join(work.path, 'credentials.json'), 'utf8')) as {
      token: string;
    };
    expect(saved.token.split('.')).toHaveLength(3);
  });

  it('submits a directory, shows upload progress, follows the log to the end', async () => {
    const r = await cli([
      'submit',
      join(work.path, 'project'),
      '--command',
      'python3 train.py',
      '--name',
      'cli-job',
      '--follow',
    ]);
    expect(r.code, `${r.stderr}\n${r.stdout}`).toBe(0);
    jobId = r.stdout.split('\n')[0]!.trim();
    expect(jobId).toMatch(/^job_/);
    expect(r.stdout).toContain(`hello from ${jobId}`);
    expect(r.stderr).toContain('uploading code');
    expect(r.stderr).toContain(`job ${jobId} succeeded (exit 0)`);
  });

  it('lists, shows, prints logs, and downloads outputs', async () => {
    const ls = await cli(['ls']);
    expect(ls.stdout).toMatch(new RegExp(`${jobId}\\s+cli-job\\s+succeeded`));
    const status = await cli(['status', jobId]);
    expect(status.stdout).toContain('succeeded (exit 0)');
    expect(status.stdout).toMatch(/1\s+local\s+cpu\s+succeeded\s+0/);
    const logs = await cli(['logs', jobId]);
    expect(logs.stdout).toContain(`hello from ${jobId}`);
    const outputs = await cli(['outputs', jobId]);
    expect(outputs.stdout).toContain('result.txt');
    const dl = await cli(['outputs', jobId, '--download', join(work.path, 'dl')]);
    expect(dl.code).toBe(0);
    expect(await readFile(join(work.path, 'dl', 'result.txt'), 'utf8')).toBe('42');
    const events = await cli(['events', jobId]);
    expect(events.stdout).toMatch(/JobSubmitted[\s\S]*JobSucceeded/);
    const workers = await cli(['workers']);
    expect(workers.stdout).toMatch(/local\s+online/);
  });

  it('cancels a job', async () => {
    const r = await cli(['submit', join(work.path, 'project'), '--command', 'sleep 300']);
    const id = r.stdout.trim();
    await t.waitForJob(id, await t.token(), (j) => j.status === 'running');
    const c = await cli(['cancel', id]);
    expect(c.stdout).toContain(id);
    await t.waitForJob(id, await t.token(), (j) => j.status === 'cancelled');
  });

  it('verifies every hash chain and rebuilds the projections', async () => {
    const verify = await cli(['events', 'verify']);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toMatch(/\d+ events, \d+ chains, 0 broken/);
    const before = await (await t.http(`/v1/jobs/${jobId}`, { token: await t.token() })).json();
    const rebuild = await cli(['projections', 'rebuild']);
    expect(rebuild.code).toBe(0);
    expect(rebuild.stdout).toMatch(/rebuilt from \d+ events/);
    await waitFor('the job after the rebuild', async () => {
      const res = await t.http(`/v1/jobs/${jobId}`, { token: await t.token() });
      return res.ok ? ((await res.json()) as object) : undefined;
    });
    expect(await (await t.http(`/v1/jobs/${jobId}`, { token: await t.token() })).json()).toEqual(
      before,
    );
  });

  it('explains a missing job', async () => {
    const missing = await cli(['status', 'job_nope']);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('not found');
  });
});
