import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { ChainVerifier, SignatureVerifier, type StoredEvent } from '@trainyard/events';
import { compareWithRebuild } from '@trainyard/projections';
import { createTestDatabase, processAlive, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type Job, type TestStack } from './harness.ts';

let t: TestStack;
let admin: string;
let alice: string;
let bob: string;

const TRAIN = `#!/bin/sh
echo "starting $TRAINYARD_JOB_ID"
for i in 1 2 3; do echo "epoch $i loss 0.$((4 - i))"; done
echo "error-stream line" >&2
mkdir -p "$TRAINYARD_OUTPUT_DIR/ckpt"
printf 'weights' > "$TRAINYARD_OUTPUT_DIR/ckpt/model.bin"
cat prepared.txt > "$TRAINYARD_OUTPUT_DIR/setup-said.txt"
echo done
`;

const PASSWORDS = { alice: 'wonderland-rabbit-7', bob: 'can-we-fix-it-8' };

const cpuSpec = (over: object = {}) => ({
  name: 'e2e',
  command: 'true',
  resources: { gpus: 0 },
  ...over,
});

beforeAll(async () => {
  t = await startTestStack();
  admin = await t.token();
  for (const name of ['alice', 'bob'] as const) {
    const res = await t.http('/v1/users', {
      method: 'POST',
      token: admin,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: name, password: PASSWORDS[name], role: 'user' }),
    });
    expect(res.status).toBe(201);
  }
  alice = await t.token('alice', PASSWORDS.alice);
  bob = await t.token('bob', PASSWORDS.bob);
});

afterAll(async () => t?.stop());

describe('a training job end to end over HTTP', () => {
  let jobId: string;

  it('builds, runs, logs and keeps the outputs of a job that succeeds', async () => {
    const code = await codeArchive({ 'train.sh': TRAIN });
    const res = await submit(
      t,
      alice,
      cpuSpec({ command: 'sh train.sh', setup: 'echo setup ran > prepared.txt' }),
      code,
    );
    expect(res.status).toBe(202);
    const accepted = (await res.json()) as { id: string; status: string; seq: number };
    expect(accepted.status).toBe('submitted');
    jobId = accepted.id;

    const readOwn = await t.http(`/v1/jobs/${jobId}?after=${accepted.seq}`, { token: alice });
    expect(readOwn.status).toBe(200);
    expect(((await readOwn.json()) as Job).id).toBe(jobId);

    const job = await t.waitForJob(jobId, alice, (j) => j.status === 'succeeded');
    expect(job).toMatchObject({ owner: 'alice', exitCode: 0, failure: null });
    expect(job.startedAt).not.toBeNull();
    expect(job.finishedAt).not.toBeNull();
    expect(job.attempts).toMatchObject([
      { number: 1, workerId: 'local', gpus: [], status: 'succeeded', exitCode: 0 },
    ]);

    const logs = await (await t.http(`/v1/jobs/${jobId}/logs`, { token: alice })).text();
    expect(logs).toContain('running setup');
    expect(logs).toContain(`starting ${jobId}`);
    expect(logs).toContain('epoch 3 loss 0.1');
    expect(logs).toContain('error-stream line');

    const outputs = (await (
      await t.http(`/v1/jobs/${jobId}/outputs`, { token: alice })
    ).json()) as { path: string; size: number; sha256: string }[];
    expect(outputs).toEqual([
      {
        path: 'ckpt/model.bin',
        size: 7,
        sha256: createHash('sha256').update('weights').digest('hex'),
      },
      {
        path: 'setup-said.txt',
        size: 10,
        sha256: createHash('sha256').update('setup ran\n').digest('hex'),
      },
    ]);
    const file = await t.http(`/v1/jobs/${jobId}/outputs/ckpt/model.bin`, { token: alice });
    expect(file.status).toBe(200);
    expect(await file.text()).toBe('weights');

    // A row projected before the read model named the attempt that reported the outputs: the
    // file is still found, in the bucket of the worker the log names.
    await t.stack.db
      .updateTable('jobs')
      .set({ outputs_attempt_id: null })
      .where('id', '=', jobId)
      .execute();
    const again = await t.http(`/v1/jobs/${jobId}/outputs/ckpt/model.bin`, { token: alice });
    expect(await again.text()).toBe('weights');
    await t.stack.db
      .updateTable('jobs')
      .set({ outputs_attempt_id: job.attempts[0]!.id })
      .where('id', '=', jobId)
      .execute();
  });

  it('streams the log live with follow=true until the job ends', async () => {
    const res = await submit(
      t,
      alice,
      cpuSpec({ command: 'for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done' }),
    );
    const { id } = (await res.json()) as { id: string };
    const started = Date.now();
    const text = await (await t.http(`/v1/jobs/${id}/logs?follow=true`, { token: alice })).text();
    expect(text).toContain('tick 1');
    expect(text).toContain('tick 5');
    expect(Date.now() - started).toBeGreaterThanOrEqual(800);
    expect((await t.waitForJob(id, alice, (j) => j.status === 'succeeded')).exitCode).toBe(0);
  });

  it('lists the events of the job in order, hash-chained', async () => {
    const res = await t.http(`/v1/jobs/${jobId}/events`, { token: alice });
    const events = (await res.json()) as {
      type: string;
      seq: number;
      hash: string;
      prevHash: string;
      occurredAt: string;
    }[];
    expect([...new Set(events.map((e) => e.type))]).toEqual([
      'JobSubmitted',
      'JobBuildStarted',
      'JobBuilt',
      'JobAssigned',
      'JobStarted',
      'JobOutputsSynced',
      'JobSucceeded',
    ]);
    expect(events.at(-1)!.type).toBe('JobSucceeded');
    for (let i = 1; i < events.length; i++) {
      expect(events[i]!.prevHash).toBe(events[i - 1]!.hash);
      expect(events[i]!.seq).toBeGreaterThan(events[i - 1]!.seq);
    }
  });

  it("fails a job whose command exits 3, as the user's failure, without retrying", async () => {
    const res = await submit(t, alice, cpuSpec({ command: 'echo about to fail; exit 3' }));
    const { id } = (await res.json()) as { id: string };
    const job = await t.waitForJob(id, alice, (j) => j.status === 'failed');
    expect(job.exitCode).toBe(3);
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'nonZeroExit' });
    expect(job.attempts).toHaveLength(1);
  });

  it('holds a job on the host to its memory limit, and fails one that outgrows it as out of memory', async () => {
    const grow = (mb: number) => `python3 -c "b = b'x' * (${mb} << 20); print('held', len(b))"`;
    const spec = (mb: number) =>
      cpuSpec({ command: grow(mb), resources: { gpus: 0, memoryGb: 0.125 }, maxRetries: 0 });
    const fits = (await (await submit(t, alice, spec(16))).json()) as { id: string };
    const over = (await (await submit(t, alice, spec(512))).json()) as { id: string };
    const done = await t.waitForJob(fits.id, alice, (j) => j.status === 'succeeded', 30_000);
    expect(done.exitCode).toBe(0);
    const killed = await t.waitForJob(over.id, alice, (j) => j.status === 'failed', 30_000);
    expect(killed.failure).toMatchObject({ kind: 'user', reason: 'oomKilled' });
    expect(killed.attempts).toHaveLength(1);
  });

  it('cancels a running job and its process is gone', async () => {
    const res = await submit(t, alice, cpuSpec({ command: 'exec sleep 300' }));
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, alice, (j) => j.status === 'running');
    const pidFile = join(t.sandboxes, `${id}-1`, 'attempt.pid');
    const pid = await waitFor(
      'the attempt’s process group',
      async () => Number(await readFile(pidFile, 'utf8').catch(() => '')) || undefined,
    );
    const groupAlive = () => {
      try {
        process.kill(-pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(processAlive(pid)).toBe(true);
    expect(groupAlive()).toBe(true);
    const { msg } = JSON.parse(
      await readFile(join(t.sandboxes, `${id}-1`, 'attempt.json'), 'utf8'),
    ) as { msg: { resources?: unknown; headSeq?: number; attemptId: string } };
    const events = (await (await t.http(`/v1/jobs/${id}/events`, { token: alice })).json()) as {
      type: string;
      seq: number;
      data: { attemptId?: string; vramBytes?: number; cpus?: number };
    }[];
    const assigned = events.find((e) => e.type === 'JobAssigned')!;
    expect(msg.attemptId).toBe(assigned.data.attemptId);
    expect(msg.headSeq).toBe(assigned.seq);
    expect(msg.resources).toEqual({ vramBytes: assigned.data.vramBytes, cpus: assigned.data.cpus });
    const cancel = await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token: alice });
    expect(cancel.status).toBe(202);
    const job = await t.waitForJob(id, alice, (j) => j.status === 'cancelled');
    expect(job.attempts[0]!.status).toBe('cancelled');
    await waitFor('the process group to be gone', () => !groupAlive(), { timeoutMs: 5_000 });
    const again = await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token: alice });
    expect(again.status).toBe(409);
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe('JOB_FINISHED');
  });

  it('stops an attempt at its time limit and fails the job as timeLimit, without a retry', async () => {
    const res = await submit(t, alice, cpuSpec({ command: 'exec sleep 300', timeLimit: '2s' }));
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, alice, (j) => j.status === 'running');
    const pid = Number(await readFile(join(t.sandboxes, `${id}-1`, 'attempt.pid'), 'utf8'));
    const job = await t.waitForJob(id, alice, (j) => j.status === 'failed', 30_000);
    expect(job).toMatchObject({
      timeLimit: 2,
      attemptCount: 1,
      failure: { kind: 'user', reason: 'timeLimit', retryable: false },
    });
    expect(job.failure?.message).toContain('time limit of 2s');
    const ran = Date.parse(job.finishedAt!) - Date.parse(job.startedAt!);
    expect(ran).toBeGreaterThanOrEqual(2_000);
    expect(ran).toBeLessThan(20_000);
    expect(processAlive(pid)).toBe(false);
    const types = (
      (await (await t.http(`/v1/jobs/${id}/events`, { token: alice })).json()) as {
        type: string;
      }[]
    ).map((e) => e.type);
    expect(types.slice(-2)).toEqual(['JobTimeLimitReached', 'JobAttemptFailed']);
    const bad = await submit(t, alice, cpuSpec({ timeLimit: 'a while' }));
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('timeLimit');
  });

  it('starts a job once the jobs it depends on succeed, and fails one whose dependency failed', async () => {
    const idOf = async (res: Response) => ((await res.json()) as { id: string }).id;
    const first = await idOf(await submit(t, alice, cpuSpec({ command: 'sleep 2' })));
    const after = await idOf(await submit(t, alice, cpuSpec({ dependsOn: [first] })));
    await t.waitForJob(first, alice, (j) => j.status === 'running');
    const waiting = await t.waitForJob(after, alice, (j) => j.status === 'queued');
    expect(waiting).toMatchObject({ dependsOn: [first], dependenciesMet: false, attempts: [] });
    const done = await t.waitForJob(after, alice, (j) => j.status === 'succeeded');
    const firstDone = await t.waitForJob(first, alice, (j) => j.status === 'succeeded');
    expect(done.dependenciesMet).toBe(true);
    expect(Date.parse(done.startedAt!)).toBeGreaterThanOrEqual(Date.parse(firstDone.finishedAt!));

    const failing = await idOf(await submit(t, alice, cpuSpec({ command: 'sleep 1; exit 3' })));
    const never = await idOf(await submit(t, alice, cpuSpec({ dependsOn: [first, failing] })));
    const failed = await t.waitForJob(never, alice, (j) => j.status === 'failed');
    expect(failed).toMatchObject({
      attempts: [],
      failure: { kind: 'user', reason: 'dependencyFailed' },
    });
    expect(failed.failure?.message).toContain(`job ${failing} failed`);

    const refused = async (dependsOn: string[], said: string) => {
      const res = await submit(t, alice, cpuSpec({ dependsOn }));
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe('VALIDATION_FAILED');
      expect(error.message).toContain(said);
    };
    const bobs = await idOf(await submit(t, bob, cpuSpec()));
    await refused([failing], `job ${failing} failed`);
    await refused(['job_nosuchjob'], 'job job_nosuchjob not found');
    await refused([bobs], `job ${bobs} not found`);
    await refused([first, first], 'names a job twice');
    await refused(['../etc'], 'a job id');
  });

  it('cancels a queued job that never ran', async () => {
    const idOf = async (res: Response) => ((await res.json()) as { id: string }).id;
    const sleeper = await idOf(await submit(t, alice, cpuSpec({ command: 'exec sleep 600' })));
    onTestFinished(async () => {
      await t.http(`/v1/jobs/${sleeper}/cancel`, { method: 'POST', token: alice });
    });
    const id = await idOf(await submit(t, alice, cpuSpec({ dependsOn: [sleeper] })));
    await t.waitForJob(id, alice, (j) => j.status === 'queued');
    await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token: alice });
    const job = await t.waitForJob(id, alice, (j) => j.status === 'cancelled');
    expect(job.attempts).toEqual([]);
  });

  it('refuses a job no registered worker could ever hold, and says why a job waits', async () => {
    const res = await submit(t, alice, cpuSpec({ resources: { gpus: 1, vramGb: 1 } }));
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('UNSATISFIABLE');
    expect(error.message).toContain(
      'no registered worker could ever run this job: it needs 1 GPU with 1 GiB free',
    );
    expect(error.message).toContain('the workers are local (process: no GPUs');
    const dry = await t.http('/v1/jobs?dryRun=true', {
      method: 'POST',
      token: alice,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(cpuSpec({ resources: { gpus: 0, cpus: 4096 } })),
    });
    expect(dry.status).toBe(400);

    const idOf = async (r: Response) => ((await r.json()) as { id: string }).id;
    const sleeper = await idOf(await submit(t, alice, cpuSpec({ command: 'exec sleep 600' })));
    onTestFinished(async () => {
      await t.http(`/v1/jobs/${sleeper}/cancel`, { method: 'POST', token: alice });
    });
    const after = await idOf(await submit(t, alice, cpuSpec({ dependsOn: [sleeper] })));
    type Waiting = Job & {
      pendingReason: string | null;
      queuePosition: number | null;
      pendingMessage: string | null;
    };
    const waiting = (await t.waitForJob(
      after,
      alice,
      (j) => (j as Waiting).pendingReason === 'dependency',
    )) as Waiting;
    expect(waiting).toMatchObject({
      queuePosition: null,
      pendingMessage: `waiting for ${sleeper} to succeed`,
    });
    const explained = (await (
      await t.http(`/v1/jobs/${after}/explain`, { token: alice })
    ).json()) as {
      entry: { reason: string; owner: string } | null;
      message: string;
    };
    expect(explained).toMatchObject({
      entry: { reason: 'dependency', owner: 'alice' },
      message: `waiting for ${sleeper} to succeed`,
    });
    const running = (await (
      await t.http(`/v1/jobs/${sleeper}/explain`, { token: alice })
    ).json()) as { entry: unknown; message: string };
    expect(running).toEqual({
      id: sleeper,
      status: 'running',
      entry: null,
      message: 'it does not wait: it is running',
    });
    expect((await t.http(`/v1/jobs/${after}/explain`, { token: bob })).status).toBe(404);

    const queue = (await (await t.http('/v1/queue', { token: alice })).json()) as {
      entries: { id: string; owner: string }[];
      holders: { owner: string }[];
    };
    expect(queue.entries.map((e) => e.id)).toContain(after);
    expect(queue.entries.every((e) => e.owner === 'alice')).toBe(true);
    expect(queue.holders.map((h) => h.owner)).toEqual(['alice']);
    expect(
      (await (await t.http('/v1/queue', { token: bob })).json()) as { entries: unknown[] },
    ).toMatchObject({ entries: [] });
    expect((await t.http('/v1/queue?all=true', { token: bob })).status).toBe(403);
    const all = (await (await t.http('/v1/queue?all=true', { token: admin })).json()) as {
      holders: { owner: string; jobs: number }[];
    };
    expect(all.holders).toContainEqual(expect.objectContaining({ owner: 'alice' }));
    await t.http(`/v1/jobs/${sleeper}/cancel`, { method: 'POST', token: alice });
    const failed = await t.waitForJob(after, alice, (j) => j.status === 'failed');
    expect(failed.failure?.reason).toBe('dependencyFailed');
  });

  it('refuses an archive that climbs out of its directory at upload, naming the entry', async () => {
    const { execFileSync } = await import('node:child_process');
    const bad = execFileSync('python3', [
      '-c',
      "import io,sys,tarfile\nb=io.BytesIO()\nt=tarfile.open(fileobj=b,mode='w:gz')\ni=tarfile.TarInfo('../evil.sh')\ni.size=1\nt.addfile(i,io.BytesIO(b'x'))\nt.close()\nsys.stdout.buffer.write(b.getvalue())",
    ]);
    const before = await t.stack.ctx.bus.store.lastSeq();
    const res = await submit(t, alice, cpuSpec({ command: 'sh evil.sh' }), bad);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: { code: 'BAD_ARCHIVE', message: 'entry "../evil.sh" points outside the archive' },
    });
    expect(await t.stack.ctx.bus.store.lastSeq()).toBe(before);
  });
});

describe('the API guards its input and its users', () => {
  it('answers 401 without a token or with a bad password', async () => {
    const res = await t.http('/v1/jobs');
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({
      error: { code: 'UNAUTHENTICATED', message: 'missing bearer token' },
    });
    const login = await t.http('/v1/auth/login', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'alice', password: 'wrong' }),
    });
    expect(login.status).toBe(401);
    expect((await t.http('/v1/jobs', { token: 'not-a-jwt' })).status).toBe(401);
  });

  it('answers 400 naming the field for an invalid spec, and stores nothing', async () => {
    const upTo = await t.stack.ctx.bus.store.lastSeq();
    const before = (await (
      await t.http(`/v1/jobs?limit=500&after=${upTo}`, { token: alice })
    ).json()) as Job[];
    const res = await submit(t, alice, { name: 'x', command: 'true', resources: { gpus: -1 } });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('VALIDATION_FAILED');
    expect(body.error.message).toContain('spec.resources.gpus');
    const notJson = await submit(t, alice, 'nope' as unknown as object);
    expect(notJson.status).toBe(400);
    const badCode = await submit(t, alice, cpuSpec(), Buffer.from('this is not an archive'));
    expect(badCode.status).toBe(400);
    expect(((await badCode.json()) as { error: { code: string } }).error.code).toBe('BAD_ARCHIVE');
    const after = (await (
      await t.http(`/v1/jobs?limit=500&after=${await t.stack.ctx.bus.store.lastSeq()}`, {
        token: alice,
      })
    ).json()) as Job[];
    expect(after.length).toBe(before.length);
  });

  it("hides another user's job (404) and shows an admin everything", async () => {
    const res = await submit(t, alice, cpuSpec());
    const { id, seq } = (await res.json()) as { id: string; seq: number };
    for (const path of [
      `/v1/jobs/${id}`,
      `/v1/jobs/${id}/events`,
      `/v1/jobs/${id}/logs`,
      `/v1/jobs/${id}/outputs`,
    ]) {
      expect((await t.http(path, { token: bob })).status).toBe(404);
    }
    expect((await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token: bob })).status).toBe(
      404,
    );
    expect((await t.http(`/v1/jobs/${id}?after=${seq}`, { token: admin })).status).toBe(200);
    const bobs = (await (await t.http(`/v1/jobs?after=${seq}`, { token: bob })).json()) as Job[];
    expect(bobs.some((j) => j.id === id)).toBe(false);
    const all = (await (
      await t.http(`/v1/jobs?after=${seq}&limit=500`, { token: admin })
    ).json()) as Job[];
    expect(all.some((j) => j.id === id)).toBe(true);
  });

  it('answers 404 for a job that does not exist, and 403 for user creation by a non-admin', async () => {
    expect((await t.http('/v1/jobs/job_doesnotexist', { token: alice })).status).toBe(404);
    expect((await t.http('/v1/jobs/..%2F..%2Fetc', { token: alice })).status).toBe(404);
    const res = await t.http('/v1/users', {
      method: 'POST',
      token: alice,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'mallory', password: 'password-1', role: 'admin' }),
    });
    expect(res.status).toBe(403);
  });
});

describe('the system around the jobs', () => {
  it('lists the worker, and answers health, metrics and the OpenAPI document', async () => {
    const workers = (await (await t.http('/v1/workers', { token: alice })).json()) as {
      id: string;
      status: string;
      cpuSlots: number;
      lastHeartbeatAt: string;
    }[];
    expect(workers).toMatchObject([{ id: 'local', status: 'online', cpuSlots: 2 }]);
    expect(workers[0]!.lastHeartbeatAt).not.toBeNull();
    expect(await (await t.http('/healthz')).json()).toEqual({
      status: 'ok',
      nats: true,
      postgres: true,
    });
    const metrics = await (await t.http('/metrics')).text();
    expect(metrics).toMatch(/trainyard_jobs_submitted_total \d+/);
    expect(metrics).toMatch(/trainyard_jobs\{status="succeeded"\} \d+/);
    const docs = (await (await t.http('/docs/json')).json()) as {
      openapi: string;
      paths: Record<string, unknown>;
    };
    expect(docs.openapi).toBe('3.1.0');
    expect(Object.keys(docs.paths)).toContain('/v1/jobs/{id}/logs');
  });

  it('keeps projections equal to a rebuild from the log, and every hash chain verifies', async () => {
    const lastSeq = await t.stack.ctx.bus.store.lastSeq();
    await waitFor('the projector to catch up', async () => {
      const res = await t.http(`/v1/jobs?after=${lastSeq}`, { token: admin });
      return res.ok;
    });
    const scratch = await createTestDatabase(inject('pgUrl'));
    const { live, rebuilt } = await compareWithRebuild(t.stack.db, scratch, t.stack.ctx.bus.store);
    expect(rebuilt).toEqual(live);
    expect(live.jobs.length).toBeGreaterThan(5);
    const verifier = new ChainVerifier(new SignatureVerifier([t.stack.publicKey]));
    for await (const e of t.stack.ctx.bus.store.replay()) verifier.add(e as StoredEvent);
    expect(verifier.breaks).toEqual([]);
    // Every event once: as many as the log held when the check began, and no more than it holds
    // now (the end of an earlier test's job may still be landing).
    expect(verifier.count).toBeGreaterThanOrEqual(lastSeq);
    expect(verifier.count).toBeLessThanOrEqual(await t.stack.ctx.bus.store.lastSeq());
  });
});
