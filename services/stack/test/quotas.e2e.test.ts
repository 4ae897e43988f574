import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { tempDir, waitFor } from '@trainyard/testkit';
import { addUser, startTestStack, submit, type Job, type TestStack } from './harness.ts';
import { cliEnv, runCli } from './processes.ts';

let t: TestStack;
let admin: string;
let alice: string;
let work: Awaited<ReturnType<typeof tempDir>>;

const PASSWORD = 'quota-keeper-1066';

type Waiting = Job & { pendingReason: string | null; pendingMessage: string | null };

const setQuota = (user: string, body: unknown, token = admin) =>
  t.http(`/v1/users/${user}/quota`, {
    method: 'PUT',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

beforeAll(async () => {
  t = await startTestStack({ inventory: SimulatedInventory.parse('2x24GiB') });
  work = await tempDir('trainyard-quotas-');
  admin = await t.token();
  alice = await addUser(t, admin, 'alice', PASSWORD);
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('GPU quotas through the stack', () => {
  it('lets admins alone set a quota, refusing bad ones and unknown users', async () => {
    expect((await setQuota('alice', { maxGpus: 1 }, alice)).status).toBe(403);
    for (const bad of [{ maxGpus: -1 }, { maxGpus: 1.5 }, { maxGpus: 'many' }, {}]) {
      const r = await setQuota('alice', bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
    }
    const unknown = await setQuota('nobody', { maxGpus: 1 });
    expect(unknown.status).toBe(404);
    expect((await setQuota('not%20a%20name', { maxGpus: 1 })).status).toBe(400);
    const ok = await setQuota('alice', { maxGpus: 1 });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ username: 'alice', maxGpus: 1 });
    await waitFor('the users list to show it', async () => {
      const users = (await (await t.http('/v1/users', { token: admin })).json()) as {
        username: string;
        maxGpus: number | null;
      }[];
      return users.find((u) => u.username === 'alice')?.maxGpus === 1;
    });
  });

  it('keeps a job queued over its owner’s quota, saying so, and runs it once the first ends', async () => {
    const gpuJob = (command: string) => ({
      name: 'quota',
      command,
      resources: { gpus: 1, vramGb: 4 },
    });
    const first = ((await (await submit(t, alice, gpuJob('sleep 4'))).json()) as { id: string }).id;
    await t.waitForJob(first, alice, (j) => j.status === 'running', 30_000);
    const second = ((await (await submit(t, alice, gpuJob('true'))).json()) as { id: string }).id;
    const waiting = (await t.waitForJob(
      second,
      alice,
      (j) => (j as Waiting).pendingReason === 'overQuota',
    )) as Waiting;
    expect(waiting.status).toBe('queued');
    expect(waiting.pendingMessage).toContain("over alice's quota: their work holds 1 GPU of the 1");
    const done = await t.waitForJob(second, alice, (j) => j.status === 'succeeded', 30_000);
    const before = await t.waitForJob(first, alice, (j) => j.status === 'succeeded');
    expect(Date.parse(done.startedAt!)).toBeGreaterThanOrEqual(Date.parse(before.finishedAt!));
  });

  it('sets and lifts a quota with trainyard users quota', async () => {
    const env = cliEnv(t.url, admin, work.path);
    const set = await runCli(['users', 'quota', 'alice', '--max-gpus', '2'], { env });
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toContain('alice may hold 2 GPUs at once');
    const lifted = await runCli(['users', 'quota', 'alice', '--max-gpus', 'none'], { env });
    expect(lifted.stdout).toContain('alice has no GPU quota');
    for (const given of ['-3', '', '1e3', '0x10']) {
      const bad = await runCli(['users', 'quota', 'alice', '--max-gpus', given], { env });
      expect(bad.code, given).not.toBe(0);
      expect(bad.stderr).toContain('--max-gpus wants a whole number of GPUs, or "none"');
    }
  });
});
