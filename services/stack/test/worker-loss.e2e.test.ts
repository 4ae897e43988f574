import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runJobCommand, loadJob } from '@trainyard/application';
import { processAlive, tempDir, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { WorkerProcesses } from './processes.ts';

const EXAMPLES = resolve(fileURLToPath(new URL('../../../examples', import.meta.url)));

let t: TestStack;
let token: string;
let dir: Awaited<ReturnType<typeof tempDir>>;
const pool = new WorkerProcesses(() => ({
  natsUrl: t.natsUrl,
  sandboxRoot: dir.path,
  heartbeatMs: 200,
}));
const workers = pool.all;
const byName = pool.byName;
const worker = (name: string) => pool.start(name);
const attemptPid = (workerName: string, id: string, attempt = 1) =>
  pool.attemptPid(workerName, id, attempt);

async function workerList() {
  return (await (await t.http('/v1/workers', { token })).json()) as {
    id: string;
    status: string;
  }[];
}

async function online(name: string) {
  await waitFor(`worker ${name} online`, async () =>
    (await workerList()).some((w) => w.id === name && w.status === 'online'),
  );
}

/**
 * Submits a job whose first attempt hangs (later ones succeed), waits until that attempt runs,
 * and returns the job and the attempt's process group.
 */
async function firstAttemptHangs(name: string): Promise<{ id: string; pid: number }> {
  const res = await submit(t, token, {
    name,
    command: 'if [ "$TRAINYARD_ATTEMPT" = 1 ]; then exec sleep 300; fi',
    resources: { gpus: 0 },
    maxRetries: 2,
  });
  const { id } = (await res.json()) as { id: string };
  const running = await t.waitForJob(
    id,
    token,
    (j) => j.status === 'running' && j.attempts.length === 1,
  );
  return { id, pid: await attemptPid(running.attempts[0]!.workerId, id) };
}

beforeAll(async () => {
  t = await startTestStack({ localWorker: false, heartbeatTimeoutMs: 1_500 });
  token = await t.token();
  dir = await tempDir('trainyard-workers-');
});

afterAll(async () => {
  for (const w of workers) await w.kill9();
  await t?.stop();
  await dir?.remove();
});

describe('a worker that dies mid-run', () => {
  it('is marked lost; its attempt fails as a platform failure, is fenced, and the job runs again elsewhere', async () => {
    const first = worker('w-first');
    await online('w-first');
    const { id, pid } = await firstAttemptHangs('survivor');

    await first.kill9();
    // Beats that name w-first on another worker's subject do not keep it alive.
    const { nc } = t.stack.ctx.bus;
    const forged = setInterval(() => {
      nc.publish(
        'ty.hb.w-other',
        JSON.stringify({ workerId: 'w-first', at: new Date(), gpus: [], runningAttempts: [] }),
      );
    }, 200);
    const retrying = await t
      .waitForJob(id, token, (j) => j.status === 'retrying', 15_000)
      .finally(() => clearInterval(forged));
    expect(retrying.attempts[0]).toMatchObject({ status: 'failed', workerId: 'w-first' });
    expect(retrying.failure).toMatchObject({ kind: 'system', reason: 'workerLost' });
    const workersNow = await workerList();
    expect(workersNow.find((w) => w.id === 'w-first')?.status).toBe('lost');

    const snapshot = await loadJob(t.stack.ctx.bus.store, id);
    await expect(
      runJobCommand(
        t.stack.ctx.bus.store,
        id,
        {
          type: 'FinishAttempt',
          attemptId: retrying.attempts[0]!.id,
          exit: { kind: 'exited', exitCode: 0 },
          durationMs: 1,
          now: new Date(),
          jitter: 0,
        },
        { actor: { kind: 'service', id: 'late-worker' }, now: new Date() },
        { snapshot },
      ),
    ).rejects.toMatchObject({ code: 'STALE_ATTEMPT' });

    worker('w-second');
    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(done.attempts.map((a) => [a.number, a.workerId, a.status])).toEqual([
      [1, 'w-first', 'failed'],
      [2, 'w-second', 'succeeded'],
    ]);

    expect(processAlive(pid)).toBe(true);
    worker('w-first');
    await online('w-first');
    await waitFor('the orphaned process to be killed', () => !processAlive(pid), {
      timeoutMs: 5_000,
    });
  });

  it('resumes on another worker from the last checkpoint the lost one kept', async () => {
    const first = worker('w-ckpt-1');
    await online('w-ckpt-1');
    const train = [
      'ckpt="$TRAINYARD_OUTPUT_DIR/step.txt"',
      'step=0; [ -f "$ckpt" ] && step=$(cat "$ckpt")',
      'echo "from step $step resumed=${TRAINYARD_RESUMED:-0}"',
      // Written aside and renamed, as a checkpoint should be: an upload never finds it half made.
      'while [ "$step" -lt 60 ]; do',
      '  step=$((step + 1)); echo "$step" > "$ckpt.part"; mv "$ckpt.part" "$ckpt"; sleep 0.1',
      'done',
      'echo "done at step $step"',
    ].join('\n');
    const res = await submit(t, token, {
      name: 'checkpointed',
      command: train,
      resources: { gpus: 0 },
      maxRetries: 2,
    });
    const { id } = (await res.json()) as { id: string };
    // Its outputs hold a checkpoint past the start: the lost worker kept it.
    await waitFor(
      'a checkpoint in the outputs',
      async () => {
        const files = (await (await t.http(`/v1/jobs/${id}/outputs`, { token })).json()) as {
          path: string;
          size: number;
        }[];
        return files.some((f) => f.path === 'step.txt');
      },
      { timeoutMs: 15_000 },
    );
    const kept = Number(await (await t.http(`/v1/jobs/${id}/outputs/step.txt`, { token })).text());
    expect(kept).toBeGreaterThan(0);
    await first.kill9();
    // Another worker takes it: w-first, back since the first test, or this one.
    worker('w-ckpt-2');
    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(done.attempts.map((a) => a.status)).toEqual(['failed', 'succeeded']);
    expect(done.attempts[0]!.workerId).toBe('w-ckpt-1');
    expect(done.attempts[1]!.workerId).not.toBe('w-ckpt-1');
    const second = await (await t.http(`/v1/jobs/${id}/logs?attempt=2`, { token })).text();
    const from = Number(/from step (\d+) resumed=1/.exec(second)?.[1]);
    expect(from).toBeGreaterThanOrEqual(kept);
    expect(second).toContain('done at step 60');
    expect(await (await t.http(`/v1/jobs/${id}/outputs/step.txt`, { token })).text()).toBe('60\n');
  });

  it('carries the digits example’s PyTorch training on from its checkpoint on another worker', async () => {
    const first = worker('w-torch-1');
    await online('w-torch-1');
    const train = await readFile(join(EXAMPLES, 'digits-mlp', 'train.py'), 'utf8');
    const res = await submit(
      t,
      token,
      {
        name: 'digits',
        command: 'python3 train.py',
        resources: { gpus: 0 },
        env: { EPOCHS: '60', EPOCH_PAUSE: '0.25' },
        maxRetries: 2,
      },
      await codeArchive({ 'train.py': train }),
    );
    const { id } = (await res.json()) as { id: string };
    // Workers of the tests before may be online too: the one that runs it is the one killed.
    const running = await t.waitForJob(id, token, (j) => j.status === 'running', 30_000);
    const holder = running.attempts[0]!.workerId;
    const saved = await waitFor(
      'a checkpoint past epoch 1 in the outputs',
      async () => {
        const metrics = await t.http(`/v1/jobs/${id}/outputs/metrics.jsonl`, { token });
        if (metrics.status !== 200) return undefined;
        const epochs = (await metrics.text()).trim().split('\n').length;
        const files = (await (await t.http(`/v1/jobs/${id}/outputs`, { token })).json()) as {
          path: string;
        }[];
        return epochs >= 2 && files.some((f) => f.path === 'checkpoint.pt') ? epochs : undefined;
      },
      { timeoutMs: 30_000 },
    );
    await (holder === 'w-torch-1' ? first : byName.get(holder)!).kill9();
    worker('w-torch-2');
    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
    expect(done.attempts.map((a) => a.status)).toEqual(['failed', 'succeeded']);
    const second = await (await t.http(`/v1/jobs/${id}/logs?attempt=2`, { token })).text();
    const from = Number(/resumed from the checkpoint of epoch (\d+)/.exec(second)?.[1]);
    expect(from).toBeGreaterThanOrEqual(saved - 1);
    expect(second).not.toMatch(/epoch {2}1 {2}loss/);
    expect(second).toMatch(/done: accuracy 0\.(8|9)\d\d/);
  });

  it('fails the job as a system failure once retries run out', async () => {
    const res = await submit(t, token, {
      name: 'doomed',
      command: 'exec sleep 300',
      resources: { gpus: 0 },
      maxRetries: 0,
    });
    const { id } = (await res.json()) as { id: string };
    const running = await t.waitForJob(id, token, (j) => j.status === 'running');
    const holder = running.attempts[0]!.workerId;
    const pid = await attemptPid(holder, id);
    const proc = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
    for (const w of proc) await w.kill9();
    const failed = await t.waitForJob(id, token, (j) => j.status === 'failed', 15_000);
    expect(failed.failure).toMatchObject({ kind: 'system', reason: 'workerLost' });
    expect(failed.attempts).toMatchObject([{ workerId: holder, status: 'failed' }]);

    worker(holder);
    await waitFor('the orphan to be killed by the restarted worker', () => !processAlive(pid), {
      timeoutMs: 10_000,
    });
    await online(holder);
  });

  it('once it runs on after being declared lost, stops its orphan, registers again and takes work', async () => {
    for (const w of workers) await w.kill9();
    await waitFor('the killed workers to be lost', async () =>
      (await workerList()).every((w) => w.status !== 'online'),
    );
    const frozen = worker('w-frozen');
    await online('w-frozen');
    const { id, pid } = await firstAttemptHangs('thawed');

    frozen.child.kill('SIGSTOP');
    try {
      const retrying = await t.waitForJob(id, token, (j) => j.status === 'retrying', 15_000);
      expect(retrying.failure).toMatchObject({ kind: 'system', reason: 'workerLost' });
    } finally {
      frozen.child.kill('SIGCONT');
    }
    await waitFor('the orphaned attempt to be stopped', () => !processAlive(pid), {
      timeoutMs: 15_000,
    });
    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(done.attempts.map((a) => [a.number, a.workerId, a.status])).toEqual([
      [1, 'w-frozen', 'failed'],
      [2, 'w-frozen', 'succeeded'],
    ]);
    expect(frozen.child.exitCode).toBeNull();
    await frozen.kill9();
  });
});
