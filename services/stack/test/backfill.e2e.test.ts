import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { tempDir } from '@trainyard/testkit';
import { addUser, startTestStack, submit, type Job, type TestStack } from './harness.ts';
import { cliEnv, runCli } from './processes.ts';

let t: TestStack;
let alice: string;
let work: Awaited<ReturnType<typeof tempDir>>;

type Waiting = Job & {
  pendingReason: string | null;
  pendingMessage: string | null;
  expectedStart: string | null;
};

beforeAll(async () => {
  t = await startTestStack({ inventory: SimulatedInventory.parse('2x24GiB') });
  work = await tempDir('trainyard-backfill-');
  alice = await addUser(t, await t.token(), 'alice', 'backfill-keeper-1066');
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

/** A job of 20 GiB on one GPU of 24: one to a GPU. */
const oneGpu = (name: string, command: string, timeLimit?: number) => ({
  name,
  command,
  resources: { gpus: 1, vramGb: 20 },
  ...(timeLimit !== undefined && { timeLimit }),
});

const submitted = async (spec: object) =>
  ((await (await submit(t, alice, spec)).json()) as { id: string }).id;

describe('backfill through the stack', () => {
  it('reserves room for the job first in line and lets only work that ends before it start there', async () => {
    const first = await submitted(oneGpu('first', 'sleep 120', 600));
    const running = await t.waitForJob(first, alice, (j) => j.status === 'running');
    const big = await submitted({
      name: 'big',
      command: 'true',
      resources: { gpus: 2, vramGb: 20 },
    });
    const endless = await submitted(oneGpu('endless', 'true'));

    // The second GPU is idle, but a job with no time limit could hold it past `big`'s start.
    const kept = (await t.waitForJob(
      endless,
      alice,
      (j) => (j as Waiting).pendingReason === 'reserved',
    )) as Waiting;
    expect(kept.status).toBe('queued');
    expect(kept.pendingMessage).toMatch(
      /only on what is reserved for job_\w+ \(first in line, due to start by /,
    );
    const head = (await t.waitForJob(
      big,
      alice,
      (j) => (j as Waiting).expectedStart != null,
    )) as Waiting;
    expect(head.pendingReason).toBe('resources');
    const startedAt = Date.parse(running.attempts[0]!.startedAt!);
    expect(Math.abs(Date.parse(head.expectedStart!) - (startedAt + 600_000))).toBeLessThan(2_000);

    // One that ends well before then runs now, on the idle GPU.
    const short = await submitted(oneGpu('short', 'true', 60));
    await t.waitForJob(short, alice, (j) => j.status === 'succeeded', 30_000);
    expect(((await t.waitForJob(endless, alice, () => true)) as Waiting).pendingReason).toBe(
      'reserved',
    );

    const queue = await runCli(['queue'], { env: cliEnv(t.url, alice, work.path) });
    expect(queue.code, queue.stderr).toBe(0);
    expect(queue.stdout).toMatch(new RegExp(`${big}.*resources, starts by \\d{4}-\\d\\d-\\d\\d`));
    expect(queue.stdout).toMatch(new RegExp(`${endless}.*reserved`));

    // Once the first job ends, `big` takes both GPUs, and the job kept out runs after it.
    const cancel = await t.http(`/v1/jobs/${first}/cancel`, { method: 'POST', token: alice });
    expect(cancel.status).toBe(202);
    const bigDone = await t.waitForJob(big, alice, (j) => j.status === 'succeeded', 30_000);
    const endlessDone = await t.waitForJob(endless, alice, (j) => j.status === 'succeeded', 30_000);
    expect(Date.parse(endlessDone.attempts[0]!.startedAt!)).toBeGreaterThanOrEqual(
      Date.parse(bigDone.attempts[0]!.startedAt!),
    );
  });
});
