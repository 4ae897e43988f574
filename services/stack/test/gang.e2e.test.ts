import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processAlive, tempDir, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { cliEnv, runCli, WorkerProcesses } from './processes.ts';

let t: TestStack;
let token: string;
let dir: Awaited<ReturnType<typeof tempDir>>;
const pool = new WorkerProcesses(() => ({
  natsUrl: t.natsUrl,
  sandboxRoot: dir.path,
  heartbeatMs: 300,
  simulateGpus: '1x24GiB',
  address: '127.0.0.1',
}));

async function online(count: number): Promise<void> {
  await waitFor(
    `${count} workers online`,
    async () => {
      const list = (await (await t.http('/v1/workers', { token })).json()) as { status: string }[];
      return list.filter((w) => w.status === 'online').length === count;
    },
    { timeoutMs: 30_000 },
  );
}

/**
 * Each member joins a gloo process group from the variables it was given, sums the ranks, and
 * rank 0 prints what every member was given.
 */
const DDP = `
import json, os
import torch
import torch.distributed as dist

names = ['WORLD_SIZE', 'RANK', 'NODE_RANK', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT']
given = {n: os.environ[n] for n in names}
print('hello from rank', given['RANK'], flush=True)
dist.init_process_group('gloo')
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
every = [None] * dist.get_world_size()
dist.all_gather_object(every, given)
if dist.get_rank() == 0:
    print('sum of ranks', int(total.item()), flush=True)
    for g in every:
        print('member', json.dumps(g, sort_keys=True), flush=True)
dist.destroy_process_group()
`;

async function log(id: string): Promise<string> {
  const res = await t.http(`/v1/jobs/${id}/logs`, { token });
  return res.text();
}

beforeAll(async () => {
  t = await startTestStack({ localWorker: false, heartbeatTimeoutMs: 5_000 });
  token = await t.token();
  dir = await tempDir('trainyard-gang-');
  for (const name of ['gw1', 'gw2']) pool.start(name);
  await online(2);
}, 60_000);

afterAll(async () => {
  await pool.killAll();
  await t?.stop();
  await dir?.remove();
});

describe('gang jobs on two workers', () => {
  it('places both members at once, each with consistent torchrun variables', async () => {
    const res = await submit(
      t,
      token,
      {
        name: 'ddp',
        command: 'python3 ddp.py',
        resources: { gpus: 1, vramGb: 4 },
        nodes: 2,
        maxRetries: 0,
      },
      await codeArchive({ 'ddp.py': DDP }),
    );
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 90_000);
    expect(job.nodes).toBe(2);
    const [attempt] = job.attempts;
    const members = (attempt as { members?: { workerId: string; gpus: number[] }[] }).members;
    expect([attempt!.workerId, ...(members ?? []).map((m) => m.workerId)].sort()).toEqual([
      'gw1',
      'gw2',
    ]);
    // Both members' GPUs are counted.
    expect(attempt!.gpuHours).toBeGreaterThan(0);
    const text = await log(id);
    expect(text).toContain('sum of ranks 1');
    // Each member's log is its own: rank 0's is the job's, rank 1's is asked for by its rank.
    expect(text).toContain('hello from rank 0');
    expect(text).not.toContain('hello from rank 1');
    const rank1 = await t.http(`/v1/jobs/${id}/logs?rank=1`, { token });
    expect(rank1.status).toBe(200);
    const rank1Text = await rank1.text();
    expect(rank1Text).toContain('hello from rank 1');
    expect(rank1Text).not.toContain('hello from rank 0');
    const cli = await runCli(['logs', id, '--rank', '1'], {
      env: cliEnv(t.url, token, dir.path),
    });
    expect(cli.code).toBe(0);
    expect(cli.stdout).toContain('hello from rank 1');
    expect(cli.stdout).toMatch(/worker gw[12]/);
    const none = await t.http(`/v1/jobs/${id}/logs?rank=2`, { token });
    expect(none.status).toBe(400);
    expect(((await none.json()) as { error: { message: string } }).error.message).toBe(
      `rank: job ${id} runs on 2 workers, ranks 0 to 1`,
    );
    const given = [...text.matchAll(/^member (.*)$/gm)].map((m) => JSON.parse(m[1]!) as object);
    const port = (given[0] as { MASTER_PORT: string }).MASTER_PORT;
    expect(Number(port)).toBeGreaterThanOrEqual(29_500);
    expect(given).toEqual(
      ['0', '1'].map((rank) => ({
        WORLD_SIZE: '2',
        RANK: rank,
        NODE_RANK: rank,
        LOCAL_RANK: '0',
        MASTER_ADDR: '127.0.0.1',
        MASTER_PORT: port,
      })),
    );
  }, 120_000);

  it('ends the attempt of both when one member fails, and stops the other', async () => {
    const res = await submit(t, token, {
      name: 'broken',
      command: 'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; exec sleep 300',
      resources: { gpus: 1, vramGb: 4 },
      nodes: 2,
      maxRetries: 0,
    });
    const { id } = (await res.json()) as { id: string };
    const running = await t.waitForJob(id, token, (j) => j.attempts.length > 0, 30_000);
    const pid = await pool.attemptPid(running.attempts[0]!.workerId, id);
    const job = await t.waitForJob(id, token, (j) => j.status === 'failed', 60_000);
    expect(job.failure).toMatchObject({
      reason: 'nonZeroExit',
      message: expect.stringMatching(/^rank 1 \(worker gw[12]\): the command exited with code 3$/),
    });
    await waitFor('rank 0 stopped', async () => !processAlive(pid), { timeoutMs: 30_000 });
  }, 120_000);

  it('fails the attempt of both, as the platform, when one member is lost with its worker', async () => {
    const res = await submit(t, token, {
      name: 'lossy',
      command: 'if [ "$TRAINYARD_ATTEMPT" = 1 ]; then exec sleep 300; fi; echo "rank $RANK done"',
      resources: { gpus: 1, vramGb: 4 },
      nodes: 2,
      maxRetries: 1,
    });
    const { id } = (await res.json()) as { id: string };
    const running = await t.waitForJob(id, token, (j) => j.status === 'running', 30_000);
    const [attempt] = running.attempts;
    const rank1 = (attempt as { members?: { workerId: string }[] }).members![0]!.workerId;
    const rank0Pid = await pool.attemptPid(attempt!.workerId, id);
    const orphan = await pool.attemptPid(rank1, id);
    await pool.byName.get(rank1)!.kill9();
    const retrying = await t.waitForJob(id, token, (j) => j.status === 'retrying', 30_000);
    expect(retrying.failure).toMatchObject({
      kind: 'system',
      reason: 'workerLost',
      message: expect.stringMatching(new RegExp(`^rank 1 \\(worker ${rank1}\\): `)),
    });
    // Rank 0 was stopped before the attempt gave back its GPUs.
    expect(processAlive(rank0Pid)).toBe(false);
    // The lost worker comes back, stops what it left running, and the gang runs again on both.
    pool.start(rank1);
    await waitFor('the orphaned member stopped', () => !processAlive(orphan), {
      timeoutMs: 30_000,
    });
    const done = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
    expect(done.attempts.map((a) => a.status)).toEqual(['failed', 'succeeded']);
    expect(await log(id)).toContain('rank 0 done');
  }, 120_000);

  it('refuses a gang wider than the workers, and one of shards or preemptible', async () => {
    const post = (spec: object) => submit(t, token, { name: 'x', command: 'true', ...spec });
    const refusal = async (res: Response) => {
      expect(res.status).toBe(400);
      return ((await res.json()) as { error: { message: string } }).error.message;
    };
    expect(await refusal(await post({ resources: { gpus: 1, vramGb: 4 }, nodes: 3 }))).toMatch(
      /^fewer than 3 registered workers could ever run a member of this gang job: it needs 1 GPU with 4 GiB free on each of 3 workers at once; the workers are /,
    );
    expect(await refusal(await post({ resources: { gpus: 0 }, nodes: 2, shards: 2 }))).toBe(
      'nodes: a job is an array (shards) or a gang (nodes), not both',
    );
    expect(await refusal(await post({ resources: { gpus: 0 }, nodes: 2, preemptible: true }))).toBe(
      'preemptible: a gang job (nodes) is not preemptible',
    );
  });
});
