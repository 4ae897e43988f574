import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { tempDir } from '@trainyard/testkit';
import { startTestStack, submit, type Job, type TestStack } from './harness.ts';
import { BIN } from './processes.ts';

/** GPU-hours held, as `GET /v1/usage` and `trainyard usage` account them. */
let t: TestStack;
let admin: string;
const tokens: Record<string, string> = {};
let work: Awaited<ReturnType<typeof tempDir>>;
const PASSWORDS = { carol: 'tea-kettle-orbit-7', dave: 'paper-lantern-sea-8' };

type Usage = {
  from: string;
  to: string;
  users: { user: string; gpuHours: number; jobs: number; attempts: number }[];
  jobs: { id: string; name: string; owner: string; gpuHours: number; attempts: number }[];
};

const usage = async (token: string, query = '') => {
  const res = await t.http(`/v1/usage${query}`, { token });
  return { status: res.status, body: (await res.json()) as Usage };
};

async function ran(user: string, gpus: number, command: string): Promise<Job> {
  const res = await submit(t, tokens[user]!, {
    name: `${user}-${gpus}`,
    command,
    resources: { gpus, ...(gpus > 0 && { vramGb: 2 }) },
    maxRetries: 0,
  });
  const { id } = (await res.json()) as { id: string };
  return t.waitForJob(id, tokens[user]!, (j) => j.status === 'succeeded', 30_000);
}

let carolGpu: Job;
let carolCpu: Job;
let daveGpu: Job;

beforeAll(async () => {
  t = await startTestStack({ inventory: SimulatedInventory.parse('2x16GiB') });
  admin = await t.token();
  work = await tempDir('trainyard-usage-');
  for (const [name, password] of Object.entries(PASSWORDS)) {
    const created = await t.http('/v1/users', {
      method: 'POST',
      token: admin,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: name, password, role: 'user' }),
    });
    expect(created.status).toBe(201);
    tokens[name] = await t.token(name, password);
  }
  [carolGpu, carolCpu, daveGpu] = await Promise.all([
    ran('carol', 2, 'sleep 1'),
    ran('carol', 0, 'sleep 1'),
    ran('dave', 1, 'sleep 0.5'),
  ]);
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

const heldHours = (j: Job) =>
  j.attempts.reduce(
    (sum, a) =>
      sum + (a.gpus.length * (Date.parse(a.finishedAt!) - Date.parse(a.assignedAt))) / 3.6e6,
    0,
  );

describe('GPU-hours', () => {
  it('are GPUs held times the time held, per attempt and per job', () => {
    const [attempt] = carolGpu.attempts;
    expect(attempt!.gpus).toHaveLength(2);
    expect(attempt!.gpuHours).toBeCloseTo(heldHours(carolGpu), 5);
    expect(carolGpu.gpuHours).toBeCloseTo(heldHours(carolGpu), 5);
    // Two GPUs for at least a second.
    expect(carolGpu.gpuHours!).toBeGreaterThanOrEqual(2 / 3600);
    expect(carolCpu.gpuHours).toBe(0);
  });

  it('are summed per user and per job; a user sees only their own', async () => {
    const { status, body } = await usage(tokens.carol!);
    expect(status).toBe(200);
    expect(body.users).toEqual([
      { user: 'carol', gpuHours: expect.closeTo(heldHours(carolGpu), 5), jobs: 1, attempts: 1 },
    ]);
    expect(body.jobs.map((j) => j.id)).toEqual([carolGpu.id]);
    expect((await usage(tokens.carol!, '?user=dave')).status).toBe(403);
    expect((await usage(tokens.dave!)).body.users.map((u) => u.user)).toEqual(['dave']);
  });

  it('are everyone’s for an admin, or one user’s, in the window asked for', async () => {
    const all = (await usage(admin)).body;
    expect(all.users.map((u) => u.user).sort()).toEqual(['carol', 'dave']);
    expect((await usage(admin, '?user=dave')).body.jobs.map((j) => j.id)).toEqual([daveGpu.id]);
    const end = daveGpu.finishedAt!;
    // A window that ends where the job began holds none of it; one that starts half way
    // through holds the half after.
    const before = (await usage(admin, `?user=dave&to=${daveGpu.attempts[0]!.assignedAt}`)).body;
    expect(before.users).toEqual([]);
    const assigned = Date.parse(daveGpu.attempts[0]!.assignedAt);
    const half = new Date((assigned + Date.parse(end)) / 2).toISOString();
    const later = (await usage(admin, `?user=dave&from=${half}`)).body;
    expect(later.users[0]!.gpuHours).toBeCloseTo(heldHours(daveGpu) / 2, 5);
    const bad = await t.http(`/v1/usage?from=${end}&to=${end}`, { token: admin });
    expect(bad.status).toBe(400);
  });

  it('are printed by `trainyard usage`, like sacct', async () => {
    const printed = await new Promise<string>((done, fail) =>
      execFile(
        process.execPath,
        [BIN, 'usage'],
        {
          env: {
            ...process.env,
            TRAINYARD_API_URL: t.url,
            TRAINYARD_TOKEN: admin,
            XDG_CONFIG_HOME: join(work.path, 'config'),
          },
        },
        (err, stdout, stderr) => (err ? fail(new Error(stderr)) : done(stdout)),
      ),
    );
    expect(printed).toMatch(/USER\s+GPU-HOURS\s+JOBS\s+ATTEMPTS/);
    expect(printed).toMatch(/carol\s+0\.00\d\s+1\s+1/);
    expect(printed).toContain(daveGpu.id);
  });
});
