import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MetricSummary } from '@trainyard/events';
import { tempDir, waitFor } from '@trainyard/testkit';
import { addUser, codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { cliEnv, runCli } from './processes.ts';

let t: TestStack;
let alice: string;
let bob: string;
let work: Awaited<ReturnType<typeof tempDir>>;

const PASSWORDS = { alice: 'metric-minded-41', bob: 'curious-onlooker-42' };

/**
 * Reports loss on its output for four steps over two epochs, accuracy in its metrics file, and
 * a few lines that are not metrics; then says where its metrics file is.
 */
const TRAIN = `#!/bin/sh
for i in 1 2 3 4; do
  echo "TRAINYARD_METRIC {\\"step\\": $i, \\"epoch\\": $(( (i - 1) / 2 )), \\"loss\\": 0.$((5 - i))}"
done
echo 'TRAINYARD_METRIC {"loss": "not a number"}'
echo 'TRAINYARD_METRIC not json at all'
printf '{"step": 4, "accuracy": 0.9}\\n' >> "$TRAINYARD_METRICS_FILE"
printf 'garbage\\n' >> "$TRAINYARD_METRICS_FILE"
echo "metrics file: $TRAINYARD_METRICS_FILE"
`;

interface Metrics {
  summary: MetricSummary[];
  points: { seq: string; attempt: number; source: string; step: number | null }[];
  next: string | null;
}

beforeAll(async () => {
  t = await startTestStack();
  work = await tempDir('trainyard-metrics-');
  const admin = await t.token();
  alice = await addUser(t, admin, 'alice', PASSWORDS.alice);
  bob = await addUser(t, admin, 'bob', PASSWORDS.bob);
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('training metrics', () => {
  let jobId = '';

  it('keeps what a job reports on its output and in its metrics file, and adds it up', async () => {
    const code = await codeArchive({ 'train.sh': TRAIN });
    const res = await submit(
      t,
      alice,
      { name: 'metrics', command: 'sh train.sh', resources: { gpus: 0 } },
      code,
    );
    expect(res.status).toBe(202);
    jobId = ((await res.json()) as { id: string }).id;
    await t.waitForJob(jobId, alice, (j) => j.status === 'succeeded');

    const metrics = await waitFor('its points in the projection', async () => {
      const r = await t.http(`/v1/jobs/${jobId}/metrics`, { token: alice });
      expect(r.status).toBe(200);
      const m = (await r.json()) as Metrics;
      return m.points.length === 5 ? m : undefined;
    });
    expect(metrics.summary).toEqual([
      {
        name: 'accuracy',
        count: 1,
        last: 0.9,
        min: 0.9,
        max: 0.9,
        finalEpoch: null,
        finalEpochMean: 0.9,
      },
      {
        name: 'loss',
        count: 4,
        last: 0.1,
        min: 0.1,
        max: 0.4,
        finalEpoch: 1,
        finalEpochMean: expect.closeTo(0.15, 10) as number,
      },
    ]);
    expect(metrics.points.map((p) => [p.attempt, p.source, p.step]).sort()).toEqual(
      [
        [1, 'file', 4],
        [1, 'output', 1],
        [1, 'output', 2],
        [1, 'output', 3],
        [1, 'output', 4],
      ].sort(),
    );

    // Its metrics file is its own, beside its outputs and not among them.
    const logs = await (await t.http(`/v1/jobs/${jobId}/logs`, { token: alice })).text();
    const file = /metrics file: (\S+)/.exec(logs)?.[1];
    expect(file).toMatch(/\/metrics\/metrics\.jsonl$/);
    const outputs = await (await t.http(`/v1/jobs/${jobId}/outputs`, { token: alice })).json();
    expect(JSON.stringify(outputs)).not.toContain('metrics.jsonl');
  });

  it('pages through the points, and refuses a bad cursor', async () => {
    const first = (await (
      await t.http(`/v1/jobs/${jobId}/metrics?limit=3`, { token: alice })
    ).json()) as Metrics;
    expect(first.points).toHaveLength(3);
    expect(first.next).toBe(first.points[2]!.seq);
    const rest = (await (
      await t.http(`/v1/jobs/${jobId}/metrics?limit=3&after=${first.next}`, { token: alice })
    ).json()) as Metrics;
    expect(rest.points).toHaveLength(2);
    expect(rest.next).toBeNull();
    const bad = await t.http(`/v1/jobs/${jobId}/metrics?after=1;drop`, { token: alice });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe(
      'VALIDATION_FAILED',
    );
  });

  it('shows a job’s metrics to its owner alone', async () => {
    expect((await t.http(`/v1/jobs/${jobId}/metrics`, { token: bob })).status).toBe(404);
    expect((await t.http(`/v1/jobs/${jobId}/metrics`)).status).toBe(401);
    expect((await t.http(`/v1/jobs/j_nosuchjob/metrics`, { token: alice })).status).toBe(404);
  });

  it('prints them with trainyard metrics', async () => {
    const env = cliEnv(t.url, alice, work.path);
    const summary = await runCli(['metrics', jobId], { env, timeoutMs: 30_000 });
    expect(summary.code, summary.stderr).toBe(0);
    expect(summary.stdout).toMatch(/NAME\s+POINTS\s+LAST\s+MIN\s+MAX\s+FINAL EPOCH\s+FINAL MEAN/);
    expect(summary.stdout).toMatch(/loss\s+4\s+0\.1\s+0\.1\s+0\.4\s+1\s+0\.15/);
    expect(summary.stdout).toMatch(/accuracy\s+1\s+0\.9\s+0\.9\s+0\.9\s+-\s+0\.9/);
    const points = await runCli(['metrics', jobId, '--points'], { env, timeoutMs: 30_000 });
    expect(points.code, points.stderr).toBe(0);
    expect(points.stdout).toMatch(/1\s+4\s+1\s+loss=0\.1/);
    expect(points.stdout).toMatch(/1\s+4\s+-\s+accuracy=0\.9/);
    const other = await runCli(['metrics', jobId], {
      env: { ...env, TRAINYARD_TOKEN: bob },
      timeoutMs: 30_000,
    });
    expect(other.code).not.toBe(0);
    expect(other.stderr).toContain(`job ${jobId} not found`);
  });
});

/** A shard: says which it is, reports a loss of its index + 1, and shard 2 fails. */
const SHARD = `#!/bin/sh
echo "shard $TRAINYARD_SHARD_INDEX of $TRAINYARD_SHARD_COUNT"
echo "TRAINYARD_METRIC {\\"epoch\\": 0, \\"loss\\": $((TRAINYARD_SHARD_INDEX + 1))}"
[ "$TRAINYARD_SHARD_INDEX" = 2 ] && exit 3
exit 0
`;

type ArrayJob = {
  id: string;
  status: string;
  shards: number | null;
  shardOf: { jobId: string; index: number } | null;
  shardStatuses?: Record<string, number>;
  failure: { reason: string; message: string } | null;
};

describe('array jobs', () => {
  const job = async (id: string, token = alice) =>
    (await (await t.http(`/v1/jobs/${id}`, { token })).json()) as ArrayJob;

  it('builds once, runs each shard with its index, and fails once all ended when one failed', async () => {
    const dir = await tempDir('trainyard-array-');
    try {
      await writeFile(join(dir.path, 'shard.sh'), SHARD);
      const env = cliEnv(t.url, alice, work.path);
      const sent = await runCli(
        [
          'submit',
          dir.path,
          '--name',
          'sweep',
          '--command',
          'sh shard.sh',
          '--shards',
          '3',
          '--json',
        ],
        { env },
      );
      expect(sent.code, sent.stderr).toBe(0);
      const id = (JSON.parse(sent.stdout) as { id: string }).id;
      expect(sent.stderr).toContain(`an array job of 3 shards, ${id}_0 … ${id}_2`);
      await t.waitForJob(id, alice, (j) => j.status === 'failed', 60_000);
      const array = await job(id);
      expect(array).toMatchObject({
        shards: 3,
        shardOf: null,
        shardStatuses: { succeeded: 2, failed: 1 },
      });
      expect(array.failure).toMatchObject({ reason: 'shardFailed' });
      expect(array.failure!.message).toContain(`${id}_2`);
      for (const index of [0, 1, 2]) {
        const shard = await job(`${id}_${index}`);
        expect(shard).toMatchObject({
          status: index === 2 ? 'failed' : 'succeeded',
          shardOf: { jobId: id, index },
        });
        const logs = await (await t.http(`/v1/jobs/${id}_${index}/logs`, { token: alice })).text();
        expect(logs).toContain(`shard ${index} of 3`);
      }
      // Built once, for the array job: its shards run what it was built into.
      const types = async (of: string) =>
        (await t.stack.ctx.bus.store.load('job', of)).events.map((e) => e.type);
      expect(await types(id)).toContain('JobBuilt');
      for (const index of [0, 1, 2])
        expect(await types(`${id}_${index}`)).not.toContain('JobBuildStarted');

      const metrics = await waitFor('every shard’s metrics', async () => {
        const r = await t.http(`/v1/jobs/${id}/metrics`, { token: alice });
        const m = (await r.json()) as Metrics & {
          shards: { jobId: string; summary: MetricSummary[] }[];
        };
        return m.shards?.length === 3 ? m : undefined;
      });
      expect(metrics.summary).toEqual([
        {
          name: 'loss',
          count: 3,
          last: 2,
          min: 1,
          max: 3,
          finalEpoch: 0,
          finalEpochMean: 2,
        },
      ]);
      expect(metrics.shards.map((s) => [s.jobId, s.summary[0]!.last])).toEqual([
        [`${id}_0`, 1],
        [`${id}_1`, 2],
        [`${id}_2`, 3],
      ]);
      const shown = await runCli(['status', id], { env });
      expect(shown.stdout).toContain(
        `array job of 3 shards (${id}_0 … ${id}_2): 1 failed, 2 succeeded`,
      );
      expect(shown.stdout).not.toContain('ATTEMPT');
      const printed = await runCli(['metrics', id], { env });
      expect(printed.stdout).toContain('all 3 shards that reported:');
      expect(printed.stdout).toMatch(new RegExp(`${id}_1\\s+loss\\s+1\\s+2\\s`));
      expect((await t.http(`/v1/jobs/${id}`, { token: bob })).status).toBe(404);
      expect((await t.http(`/v1/jobs/${id}_0`, { token: bob })).status).toBe(404);
    } finally {
      await dir.remove();
    }
  });

  it('cancels one shard alone, or the array job and every shard with it', async () => {
    const huge = await submit(t, alice, {
      name: 'huge',
      command: 'true',
      resources: { gpus: 0 },
      shards: 1000,
      env: { BIG: 'x'.repeat(20_000) },
    });
    expect(huge.status).toBe(400);
    expect(await huge.text()).toContain('shards: each shard carries the spec');
    const res = await submit(t, alice, {
      name: 'long sweep',
      command: 'sleep 300',
      resources: { gpus: 0 },
      shards: 3,
    });
    const id = ((await res.json()) as { id: string }).id;
    // Two CPU slots: two shards run, the third waits.
    await t.waitForJob(`${id}_0`, alice, (j) => j.status === 'running', 30_000);
    await t.waitForJob(`${id}_1`, alice, (j) => j.status === 'running', 30_000);
    const env = cliEnv(t.url, alice, work.path);
    const one = await runCli(['cancel', `${id}_0`], { env });
    expect(one.code, one.stderr).toBe(0);
    await t.waitForJob(`${id}_0`, alice, (j) => j.status === 'cancelled', 30_000);
    await t.waitForJob(`${id}_2`, alice, (j) => j.status === 'running', 30_000);
    expect((await job(id)).status).toBe('running');
    expect((await job(`${id}_1`)).status).toBe('running');
    // Its shards take the array job's priority, and no shard's own may be changed.
    const patch = (of: string) =>
      t.http(`/v1/jobs/${of}`, {
        method: 'PATCH',
        token: alice,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ priority: -3 }),
      });
    expect((await patch(id)).status).toBe(200);
    await t.waitForJob(`${id}_2`, alice, (j) => j.priority === -3, 30_000);
    const refused = await patch(`${id}_1`);
    expect(refused.status).toBe(409);
    expect(await refused.text()).toContain(`shard 1 of array job ${id}`);
    const all = await runCli(['cancel', id], { env });
    expect(all.code, all.stderr).toBe(0);
    await t.waitForJob(id, alice, (j) => j.status === 'cancelled', 30_000);
    for (const index of [1, 2])
      await t.waitForJob(`${id}_${index}`, alice, (j) => j.status === 'cancelled', 30_000);
  });
});
