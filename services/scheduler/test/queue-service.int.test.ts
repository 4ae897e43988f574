import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_POLICY,
  emptyCluster,
  evolveCluster,
  GiB,
  type ClusterState,
} from '@trainyard/domain';
import { QueueReplySchema, Subjects, type DomainEvent, type QueueRequest } from '@trainyard/events';
import type { ServiceContext } from '@trainyard/service-kit';
import { startTestNats, storedEvent, testContext } from '@trainyard/testkit';
import { serveQueue, type QueueService } from '../src/queue-service.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let ctx: ServiceContext;
let service: QueueService;
const cluster: ClusterState = emptyCluster();
let seq = 0;
const fold = (aggregate: 'job' | 'worker', id: string, event: DomainEvent) =>
  evolveCluster(cluster, storedEvent(aggregate, id, event, { seq: ++seq, at: new Date() }));

const job = (owner: string, gpus: number): DomainEvent => ({
  type: 'JobSubmitted',
  data: {
    owner,
    spec: {
      name: 'j',
      command: 'true',
      resources: { gpus, vramGb: 20 },
      priority: 0,
      maxRetries: 0,
      env: {},
    },
  },
});

beforeAll(async () => {
  nats = await startTestNats();
  ctx = await testContext(nats.url, 'queue-test');
  fold('worker', 'w1', {
    type: 'WorkerRegistered',
    data: {
      name: 'w1',
      hostname: 'h',
      cpuSlots: 0,
      runtime: 'process',
      version: 't',
      runningAttempts: [],
      gpus: [{ index: 0, name: 'sim', uuid: 'u0', vramBytes: 24 * GiB, simulated: true }],
    },
  });
  fold('job', 'job_running', job('alice', 1));
  fold('job', 'job_running', {
    type: 'JobAssigned',
    data: { attemptId: 'a1', attempt: 1, workerId: 'w1', gpus: [0], vramBytes: 20 * GiB, cpus: 0 },
  });
  for (const [id, owner] of [
    ['job_a1', 'alice'],
    ['job_b1', 'bob'],
    ['job_a2', 'alice'],
    ['job_a3', 'alice'],
  ])
    fold('job', id!, job(owner!, 1));
  fold('job', 'job_huge', job('bob', 4));
  service = serveQueue(ctx, () => cluster, DEFAULT_POLICY);
});

afterAll(async () => {
  service?.stop();
  await ctx?.bus.close();
  await nats?.stop();
});

const ask = async (request: QueueRequest | object) =>
  (
    await ctx.bus.nc.request(Subjects.queue, JSON.stringify(request), { timeout: 2_000 })
  ).json<unknown>();

describe('the scheduler’s answers about the queue', () => {
  it('lists one owner’s entries with their places in the whole queue, and what they alone hold', async () => {
    const reply = QueueReplySchema.parse(await ask({ op: 'list', owner: 'alice', limit: 2 }));
    expect(reply.entries.map((e) => [e.id, e.position, e.reason])).toEqual([
      ['job_a1', 1, 'resources'],
      ['job_a2', 3, 'priority'],
    ]);
    expect(reply).toMatchObject({ total: 5, positioned: 5, seq });
    expect(reply.holders).toMatchObject([
      { owner: 'alice', gpus: 1, cpus: 0, jobs: 1, sessions: 0, maxGpus: null, maxGpuHours: null },
    ]);
    expect(reply.holders![0]!.gpuHours).toBeGreaterThanOrEqual(0);
    const bobs = QueueReplySchema.parse(await ask({ op: 'list', owner: 'bob', limit: 2 }));
    expect(bobs.holders).toEqual([
      {
        owner: 'bob',
        gpus: 0,
        cpus: 0,
        jobs: 0,
        sessions: 0,
        maxGpus: null,
        gpuHours: 0,
        maxGpuHours: null,
      },
    ]);
  });

  it('lists everyone’s with who holds what, and explains one entry', async () => {
    const all = QueueReplySchema.parse(await ask({ op: 'list', limit: 100 }));
    expect(all.entries.map((e) => e.id)).toEqual([
      'job_a1',
      'job_b1',
      'job_a2',
      'job_a3',
      'job_huge',
    ]);
    expect(all.holders).toMatchObject([
      { owner: 'alice', gpus: 1, cpus: 0, jobs: 1, sessions: 0, maxGpus: null },
    ]);
    const one = QueueReplySchema.parse(await ask({ op: 'explain', id: 'job_huge' }));
    expect(one.entries).toMatchObject([{ id: 'job_huge', reason: 'unsatisfiable', owner: 'bob' }]);
    const none = QueueReplySchema.parse(await ask({ op: 'explain', id: 'job_running' }));
    expect(none.entries).toEqual([]);
  });

  it('answers a request it cannot read with an error, and goes on answering', async () => {
    expect(await ask({ op: 'list', limit: 0 })).toEqual({ error: 'not a queue request' });
    expect(await ask({ op: 'drop' })).toEqual({ error: 'not a queue request' });
    expect(QueueReplySchema.safeParse(await ask({ op: 'list', limit: 1 })).success).toBe(true);
  });
});
