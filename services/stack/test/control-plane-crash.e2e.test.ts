import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { compareWithRebuild } from '@trainyard/projections';
import { createTestDatabase, waitFor } from '@trainyard/testkit';
import { startTestStack, submit, type Job, type TestStack } from './harness.ts';
import { startService, type ServiceProcess } from './processes.ts';

let t: TestStack;
let token: string;
let projector: ServiceProcess;
const procs: ServiceProcess[] = [];
const env = () => ({
  TRAINYARD_NATS_URL: t.natsUrl,
  DATABASE_URL: t.databaseUrl,
  TRAINYARD_LEASE_TTL_MS: '1000',
});

function service(args: string[]): ServiceProcess {
  const p = startService(args, env());
  procs.push(p);
  return p;
}

async function leaseHolderPid(): Promise<number | null> {
  const kv = await new Kvm(t.stack.ctx.bus.js).open('ty_leases');
  const entry = await kv.get('scheduler');
  if (!entry || entry.operation !== 'PUT') return null;
  return Number(entry.string().split(':').pop());
}

/** No two attempts ever held the same GPU of the same worker at once. */
function assertNoDoubleBooking(jobs: Job[]) {
  const spans = jobs.flatMap((j) =>
    j.attempts
      .filter((a) => a.startedAt)
      .flatMap((a) =>
        a.gpus.map((gpu) => ({
          key: `${a.workerId}/${gpu}`,
          from: Date.parse(a.startedAt!),
          to: Date.parse(a.finishedAt ?? new Date().toISOString()),
        })),
      ),
  );
  for (const a of spans) {
    for (const b of spans) {
      if (a !== b && a.key === b.key) expect(a.to <= b.from || b.to <= a.from).toBe(true);
    }
  }
}

const gpuJob = { name: 'gpu', command: 'sleep 0.2', resources: { gpus: 1, vramGb: 20 } };

beforeAll(async () => {
  t = await startTestStack({
    without: ['scheduler', 'projector'],
    inventory: SimulatedInventory.parse('2x24GiB'),
  });
  token = await t.token();
  projector = service(['projector']);
});

afterAll(async () => {
  for (const p of procs) await p.kill9();
  await t?.stop();
});

describe('the scheduler killed with kill -9', () => {
  it('is replaced by the standby, which carries on from the log without double-booking a GPU', async () => {
    service(['scheduler']);
    service(['scheduler']);
    const first: string[] = [];
    for (let i = 0; i < 4; i++)
      first.push(((await (await submit(t, token, gpuJob)).json()) as { id: string }).id);
    for (const id of first) await t.waitForJob(id, token, (j) => j.status === 'succeeded', 20_000);

    const leader = await waitFor('a lease holder', leaseHolderPid);
    const victim = procs.find((p) => p.child.pid === leader);
    expect(victim).toBeDefined();
    const queued: string[] = [];
    for (let i = 0; i < 6; i++)
      queued.push(((await (await submit(t, token, gpuJob)).json()) as { id: string }).id);
    await victim!.kill9();

    const jobs: Job[] = [];
    for (const id of queued)
      jobs.push(await t.waitForJob(id, token, (j) => j.status === 'succeeded', 20_000));
    expect(await leaseHolderPid()).not.toBe(leader);
    for (const j of jobs) expect(j.attempts).toHaveLength(1);
    const all = await Promise.all(
      [...first, ...queued].map(
        async (id) => (await (await t.http(`/v1/jobs/${id}`, { token })).json()) as Job,
      ),
    );
    assertNoDoubleBooking(all);
  });
});

describe('the projector killed with kill -9 mid-stream', () => {
  it('resumes from its checkpoint: no row missing, none twice, equal to a rebuild', async () => {
    const ids: string[] = [];
    const burst = Promise.all(
      Array.from({ length: 40 }, async () => {
        const res = await t.http('/v1/jobs', {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'cpu', command: 'true', resources: { gpus: 0 } }),
        });
        ids.push(((await res.json()) as { id: string }).id);
      }),
    );
    await new Promise((r) => setTimeout(r, 50));
    await projector.kill9();
    await burst;
    projector = service(['projector']);
    const lastSeq = await t.stack.ctx.bus.store.lastSeq();
    await waitFor(
      'the projector to catch up',
      async () => (await t.http(`/v1/jobs?after=${lastSeq}&limit=500`, { token })).ok,
      {
        timeoutMs: 20_000,
      },
    );
    const listed = (await (await t.http(`/v1/jobs?limit=500`, { token })).json()) as Job[];
    for (const id of ids) expect(listed.filter((j) => j.id === id)).toHaveLength(1);

    const upTo = await t.stack.ctx.bus.store.lastSeq();
    await waitFor(
      'the live projection to reach the log',
      async () => (await t.http(`/v1/jobs?after=${upTo}`, { token })).ok,
    );
    const scratch = await createTestDatabase(inject('pgUrl'));
    const { live, rebuilt } = await compareWithRebuild(t.stack.db, scratch, t.stack.ctx.bus.store);
    expect(rebuilt).toEqual(live);
  });
});

describe('every scheduler killed with kill -9', () => {
  it('leaves the worker to stop an attempt past its time limit, and the job fails as timeLimit', async () => {
    const scheduler = service(['scheduler']);
    const res = await submit(t, token, { ...gpuJob, command: 'exec sleep 300', timeLimit: '3s' });
    const id = ((await res.json()) as { id: string }).id;
    await t.waitForJob(id, token, (j) => j.status === 'running', 20_000);
    for (const p of procs.filter((p) => p !== projector)) await p.kill9();
    expect(scheduler.child.exitCode ?? scheduler.child.signalCode).not.toBeNull();
    // No scheduler records the limit: the worker stops the attempt 5 s past it, by itself.
    const failed = (await t.waitForJob(id, token, (j) => j.status === 'failed', 30_000)) as Job & {
      failure: { reason: string; retryable: boolean } | null;
    };
    expect(failed.failure).toMatchObject({ reason: 'timeLimit', retryable: false });
    expect(failed.attempts).toHaveLength(1);
    const ran =
      Date.parse(failed.attempts[0]!.finishedAt!) - Date.parse(failed.attempts[0]!.startedAt!);
    expect(ran).toBeGreaterThanOrEqual(7_000);
    const types = (await t.stack.ctx.bus.store.load('job', id)).events.map((e) => e.type);
    expect(types).not.toContain('JobTimeLimitReached');
    expect(types.at(-1)).toBe('JobAttemptFailed');
  });
});
