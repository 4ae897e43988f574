import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { tempDir, waitFor } from '@trainyard/testkit';
import { addUser, startTestStack, submit, type Job, type TestStack } from './harness.ts';
import { cliEnv, runCli } from './processes.ts';

let t: TestStack;
let admin: string;
let alice: string;
let bob: string;
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
  bob = await addUser(t, admin, 'bob', PASSWORD);
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

describe('GPU-hour quotas through the stack', () => {
  it('holds a user’s work back once it took their GPU-hours this month, until lifted', async () => {
    const dave = await addUser(t, admin, 'dave', PASSWORD);
    const env = cliEnv(t.url, admin, work.path);
    const bad = await setQuota('dave', { maxGpuHours: -1 });
    expect(bad.status).toBe(400);
    const badFlag = await runCli(['users', 'quota', 'dave', '--max-gpu-hours', '1e3'], { env });
    expect(badFlag.stderr).toContain('--max-gpu-hours wants a number of GPU-hours');
    const set = await runCli(['users', 'quota', 'dave', '--max-gpu-hours', '0.0001'], { env });
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toContain('dave may take 0.0001 GPU-hours a month');

    const gpuJob = (command: string) => ({
      name: 'hours',
      command,
      resources: { gpus: 1, vramGb: 4 },
    });
    const first = ((await (await submit(t, dave, gpuJob('sleep 1'))).json()) as { id: string }).id;
    await t.waitForJob(first, dave, (j) => j.status === 'succeeded', 30_000);
    const second = ((await (await submit(t, dave, gpuJob('true'))).json()) as { id: string }).id;
    const waiting = (await t.waitForJob(
      second,
      dave,
      (j) => (j as Waiting).pendingReason === 'overQuota',
    )) as Waiting;
    expect(waiting.pendingMessage).toMatch(
      /^over dave's quota of 0\.0001 GPU-hours a month: their work took 0\.\d+ this month/,
    );
    const mine = await runCli(['queue'], { env: cliEnv(t.url, dave, work.path) });
    expect(mine.stdout).toMatch(/your work took 0\.\d+ of your 0\.0001 GPU-hours this month/);

    const lifted = await runCli(['users', 'quota', 'dave', '--max-gpu-hours', 'none'], { env });
    expect(lifted.stdout).toContain('dave has no GPU-hour quota');
    await t.waitForJob(second, dave, (j) => j.status === 'succeeded', 30_000);
    const users = (await (await t.http('/v1/users', { token: admin })).json()) as {
      username: string;
      maxGpuHours: number | null;
    }[];
    expect(users.find((u) => u.username === 'dave')?.maxGpuHours).toBeNull();
  });
});

const current = (id: string, token: string) => t.waitForJob(id, token, () => true);

const post = (path: string, token: string, body: unknown = {}) =>
  t.http(path, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('holding jobs through the stack', () => {
  it('keeps a held job queued while others run, an admin’s hold over its owner’s, until released', async () => {
    const gpuJob = (command: string) => ({
      name: 'held',
      command,
      resources: { gpus: 1, vramGb: 4 },
    });
    expect((await setQuota('alice', { maxGpus: 0 })).status).toBe(200);
    const id = ((await (await submit(t, alice, gpuJob('true'))).json()) as { id: string }).id;
    await t.waitForJob(id, alice, (j) => (j as Waiting).pendingReason === 'overQuota');

    expect((await post(`/v1/jobs/${id}/hold`, bob)).status).toBe(404);
    expect((await post(`/v1/jobs/${id}/hold`, alice, { reason: 'x'.repeat(513) })).status).toBe(
      400,
    );
    expect((await post(`/v1/jobs/${id}/hold`, alice, { reason: 'data', extra: 1 })).status).toBe(
      400,
    );
    expect((await post(`/v1/jobs/${id}/hold`, alice, { reason: 'a\u001b[2Jb' })).status).toBe(400);
    expect((await post('/v1/jobs/job_nope/hold', alice)).status).toBe(404);
    expect((await t.http(`/v1/jobs/${id}/hold`, { method: 'POST' })).status).toBe(401);
    const held = await post(`/v1/jobs/${id}/hold`, alice, { reason: 'data not ready' });
    expect(held.status).toBe(200);
    expect(await held.json()).toMatchObject({ id, status: 'queued', held: { by: 'owner' } });
    const waiting = (await t.waitForJob(
      id,
      alice,
      (j) => (j as Waiting).pendingReason === 'held' && j.held !== null,
    )) as Waiting & { held: unknown };
    expect(waiting.held).toEqual({ by: 'owner', reason: 'data not ready' });
    expect(waiting.pendingMessage).toBe(
      `held by alice (data not ready): \`trainyard release ${id}\` lets it queue`,
    );

    // With the quota lifted, a job submitted after it runs while the held one, ahead of it, waits.
    expect((await setQuota('alice', { maxGpus: null })).status).toBe(200);
    const later = ((await (await submit(t, alice, gpuJob('true'))).json()) as { id: string }).id;
    await t.waitForJob(later, alice, (j) => j.status === 'succeeded', 30_000);
    expect((await current(id, alice)).status).toBe('queued');

    expect((await post(`/v1/jobs/${id}/hold`, admin, { reason: 'maintenance' })).status).toBe(200);
    const refused = await post(`/v1/jobs/${id}/release`, alice);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe(
      'HELD_BY_ADMIN',
    );
    const env = cliEnv(t.url, admin, work.path);
    const ls = await runCli(['ls', '--status', 'queued'], { env });
    expect(ls.stdout).toMatch(new RegExp(`${id}.*queued \\(held\\)`));
    const released = await runCli(['release', id], { env });
    expect(released.code, released.stderr).toBe(0);
    expect(released.stdout).toContain(`${id} released`);
    const done = await t.waitForJob(id, alice, (j) => j.status === 'succeeded', 30_000);
    expect(done.held).toBeNull();
    const events = (await (await t.http(`/v1/jobs/${id}/events`, { token: alice })).json()) as {
      type: string;
      data: unknown;
      actor: { id: string };
    }[];
    const holds = events.filter((e) => e.type === 'JobHeld' || e.type === 'JobReleased');
    expect(holds.map(({ type, data, actor }) => ({ type, data, by: actor.id }))).toEqual([
      { type: 'JobHeld', data: { by: 'owner', reason: 'data not ready' }, by: 'alice' },
      { type: 'JobHeld', data: { by: 'admin', reason: 'maintenance' }, by: 'admin' },
      { type: 'JobReleased', data: {}, by: 'admin' },
    ]);
  });

  it('refuses to hold a job that runs; submits one held with trainyard submit --hold', async () => {
    const id = (
      (await (
        await submit(t, alice, { name: 'run', command: 'sleep 30', resources: { gpus: 0 } })
      ).json()) as {
        id: string;
      }
    ).id;
    await t.waitForJob(id, alice, (j) => j.status === 'running', 30_000);
    const env = cliEnv(t.url, alice, work.path);
    const hold = await runCli(['hold', id, '--reason', 'too late'], { env });
    expect(hold.code).not.toBe(0);
    expect(hold.stderr).toContain('a hold keeps a waiting job from starting');
    expect((await current(id, alice)).held).toBeNull();
    expect((await post(`/v1/jobs/${id}/cancel`, alice)).status).toBe(202);

    const code = join(work.path, 'held-code');
    await mkdir(code);
    const submitted = await runCli(
      ['submit', code, '--command', 'true', '--gpus', '1', '--vram-gb', '4', '--hold'],
      { env },
    );
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stderr).toContain('holds no files to upload: sending the spec without code');
    const heldId = submitted.stdout.trim();
    const status = await runCli(['status', heldId], { env });
    expect(status.stdout).toContain(`held by alice: \`trainyard release ${heldId}\``);
    expect((await current(heldId, alice)).held).toEqual({ by: 'owner', reason: '' });
    const released = await runCli(['release', heldId], { env });
    expect(released.code, released.stderr).toBe(0);
    await t.waitForJob(heldId, alice, (j) => j.status === 'succeeded', 30_000);
  });
});

describe('a user’s own quota', () => {
  it('shows users what they hold against their quota, and why a session over it waits', async () => {
    expect((await setQuota('bob', { maxGpus: 1 })).status).toBe(200);
    const running = (await (
      await submit(t, bob, {
        name: 'hold-1',
        command: 'sleep 30',
        resources: { gpus: 1, vramGb: 4 },
      })
    ).json()) as { id: string };
    await t.waitForJob(running.id, bob, (j) => j.status === 'running', 30_000);

    for (const resources of [{ gpus: 3 }, { gpus: 1, vramGb: 30 }]) {
      const never = await post('/v1/sessions', bob, { resources });
      expect(never.status, JSON.stringify(resources)).toBe(400);
      expect(await never.json()).toMatchObject({
        error: {
          code: 'UNSATISFIABLE',
          message: expect.stringContaining('no registered worker could ever run this session'),
        },
      });
    }
    const made = await post('/v1/sessions', bob, { resources: { gpus: 1, vramGb: 4 } });
    expect(made.status).toBe(202);
    const session = (await made.json()) as { id: string };
    const waiting = await waitFor('the session to wait over the quota', async () => {
      const s = (await (await t.http(`/v1/sessions/${session.id}`, { token: bob })).json()) as {
        status: string;
        pendingReason: string | null;
        pendingMessage: string | null;
      };
      return s.pendingReason === 'overQuota' ? s : undefined;
    });
    expect(waiting.status).toBe('queued');
    expect(waiting.pendingMessage).toContain("over bob's quota: their work holds 1 GPU of the 1");

    const mine = await runCli(['queue'], { env: cliEnv(t.url, bob, work.path) });
    expect(mine.code, mine.stderr).toBe(0);
    expect(mine.stdout).toMatch(new RegExp(`${session.id}.*overQuota`));
    expect(mine.stdout).toContain(
      'you hold 1 GPU (of your quota of 1 at once) in 1 job and 0 sessions',
    );
    const everyone = await runCli(['queue', '--all'], { env: cliEnv(t.url, admin, work.path) });
    expect(everyone.stdout).toMatch(/USER\s+GPUS\s+QUOTA/);
    expect(everyone.stdout).toMatch(/\nbob\s+1\s+1\s+/);

    expect((await post(`/v1/sessions/${session.id}/stop`, bob)).status).toBe(202);
    expect((await post(`/v1/jobs/${running.id}/cancel`, bob)).status).toBe(202);
  });
});

describe('teams through the stack', () => {
  const put = (path: string, token: string, body: unknown = {}) =>
    t.http(path, {
      method: 'PUT',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const gpuJob = (command: string, extra: object = {}) => ({
    name: 'team',
    command,
    resources: { gpus: 1, vramGb: 4 },
    ...extra,
  });
  const submitted = async (token: string, spec: object) => {
    const res = await submit(t, token, spec);
    expect(res.status, await res.clone().text()).toBe(202);
    return ((await res.json()) as { id: string }).id;
  };

  it('charges members’ work to their team and holds it to the team’s quota', async () => {
    const carol = await addUser(t, admin, 'carol', PASSWORD);
    expect((await setQuota('bob', { maxGpus: null })).status).toBe(200);
    expect((await post('/v1/teams', alice, { name: 'vision' })).status).toBe(403);
    expect((await post('/v1/teams', admin, { name: 'Vision!' })).status).toBe(400);
    expect((await post('/v1/teams', admin, { name: 'vision' })).status).toBe(201);
    expect((await post('/v1/teams', admin, { name: 'vision' })).status).toBe(409);

    expect((await put('/v1/teams/vision/members/alice', alice)).status).toBe(403);
    expect((await put('/v1/teams/vision/members/alice', admin, { role: 'lead' })).status).toBe(200);
    expect((await put('/v1/teams/vision/members/nobody', admin)).status).toBe(404);
    expect((await put('/v1/teams/vision/members/bob', alice)).status).toBe(403);
    const added = await put('/v1/teams/vision/members/bob', admin);
    expect(await added.json()).toEqual({ team: 'vision', username: 'bob', role: 'member' });
    const again = await put('/v1/teams/vision/members/alice', admin);
    expect(await again.json()).toEqual({ team: 'vision', username: 'alice', role: 'lead' });
    expect((await put('/v1/teams/vision/members/bob', admin, { role: 'boss' })).status).toBe(400);
    expect((await put('/v1/teams/nowhere/members/carol', admin)).status).toBe(404);
    const teamsOfCarol = (await (await t.http('/v1/teams', { token: carol })).json()) as unknown[];
    expect(teamsOfCarol).toEqual([]);

    const env = cliEnv(t.url, admin, work.path);
    const quota = await runCli(['teams', 'quota', 'vision', '--max-gpus', '1'], { env });
    expect(quota.code, quota.stderr).toBe(0);
    expect(quota.stdout).toContain('vision may hold 1 GPU at once');
    const ls = await runCli(['teams', 'ls'], { env: cliEnv(t.url, bob, work.path) });
    expect(ls.stdout).toMatch(/vision\s+1\s+-\s+alice \(lead\), bob/);

    const invalid = await submit(t, bob, gpuJob('true', { team: 'other' }));
    expect(invalid.status).toBe(400);
    expect(await invalid.text()).toContain('team: you are not in a team named other');

    const first = await submitted(alice, gpuJob('sleep 30'));
    const running = await t.waitForJob(first, alice, (j) => j.status === 'running', 30_000);
    expect(running.team).toBe('vision');
    const second = await submitted(bob, gpuJob('true', { team: 'vision' }));
    const waiting = (await t.waitForJob(
      second,
      bob,
      (j) => (j as Waiting).pendingReason === 'overQuota',
    )) as Waiting;
    expect(waiting.pendingMessage).toContain(
      "over team vision's quota: its members’ work holds 1 GPU of the 1",
    );
    const teamQueue = await runCli(['queue', '--team', 'vision'], {
      env: cliEnv(t.url, alice, work.path),
    });
    expect(teamQueue.code, teamQueue.stderr).toBe(0);
    expect(teamQueue.stdout).toMatch(new RegExp(`${second}\\s+bob\\s+.*overQuota`));
    expect(teamQueue.stdout).toMatch(
      /teams holding now:\s+TEAM\s+GPUS\s+QUOTA\s+GPU-H\s+GPU-H QUOTA\s+vision\s+1\s+1/,
    );
    expect((await t.http('/v1/queue?team=vision', { token: bob })).status).toBe(403);
    expect((await t.http('/v1/queue?team=nowhere', { token: carol })).status).toBe(403);
    const everyone = await runCli(['queue', '--all'], { env });
    expect(everyone.stdout).toMatch(/vision\s+1\s+1/);
    const outside = await submitted(carol, gpuJob('true'));
    await t.waitForJob(outside, carol, (j) => j.status === 'succeeded', 30_000);

    expect((await post(`/v1/jobs/${first}/cancel`, alice)).status).toBe(202);
    await t.waitForJob(second, bob, (j) => j.status === 'succeeded', 30_000);

    expect(
      (await t.http('/v1/teams/vision/members/bob', { method: 'DELETE', token: alice })).status,
    ).toBe(403);
    const removed = await t.http('/v1/teams/vision/members/bob', {
      method: 'DELETE',
      token: admin,
    });
    expect(removed.status).toBe(200);
    const after = await submitted(bob, gpuJob('true'));
    expect((await current(after, bob)).team).toBeNull();
  });
});
