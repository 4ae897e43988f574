import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { JobEvent, StoredEvent } from '@trainyard/events';
import { loadJob, runJobCommand } from '@trainyard/application';
import { connectBus, type Bus } from '@trainyard/service-kit';
import { createTestDatabase, startTestNats, storedEvent } from '@trainyard/testkit';
import {
  applyBatch,
  connectDb,
  findJob,
  listAttempts,
  migrate,
  readCheckpoint,
  rebuildProjections,
  snapshotProjections,
  type Database,
} from '../src/index.ts';

let nats: Awaited<ReturnType<typeof startTestNats>>;
let bus: Bus;
let db: Kysely<Database>;
let other: Kysely<Database>;
const meta = () => ({ actor: { kind: 'service' as const, id: 'test' }, now: new Date() });
const spec = {
  name: 'n',
  command: 'true',
  resources: { gpus: 1, vramGb: 4 },
  priority: 0,
  maxRetries: 3,
  env: { SECRET_TOKEN: 'x' },
};

async function history(): Promise<StoredEvent[]> {
  const all: StoredEvent[] = [];
  for await (const e of bus.store.replay()) all.push(e);
  return all;
}

beforeAll(async () => {
  nats = await startTestNats();
  bus = await connectBus(nats.url, 'projections-test');
  db = connectDb(await createTestDatabase(inject('pgUrl')));
  other = connectDb(await createTestDatabase(inject('pgUrl')));
  await migrate(db);
  await migrate(other);
  await bus.store.append({
    aggregate: 'worker',
    aggregateId: 'w1',
    head: { seq: 0, hash: '0'.repeat(64) },
    events: [
      {
        type: 'WorkerRegistered',
        data: {
          name: 'w1',
          hostname: 'h',
          gpus: [],
          cpuSlots: 2,
          runtime: 'process',
          version: 't',
          runningAttempts: [],
        },
      },
    ],
    meta: meta(),
  });
  for (const id of ['job_a', 'job_b']) {
    await runJobCommand(bus.store, id, { type: 'SubmitJob', owner: 'alice', spec }, meta());
    await runJobCommand(
      bus.store,
      id,
      { type: 'AssignJob', attemptId: `${id}_1`, workerId: 'w1', gpus: [0], vramBytes: 4, cpus: 0 },
      meta(),
    );
    await runJobCommand(bus.store, id, { type: 'StartAttempt', attemptId: `${id}_1` }, meta());
  }
  await runJobCommand(
    bus.store,
    'job_a',
    {
      type: 'FinishAttempt',
      attemptId: 'job_a_1',
      exit: { kind: 'exited', exitCode: 3 },
      durationMs: 5,
      now: new Date(),
      jitter: 0,
    },
    meta(),
  );
});

afterAll(async () => {
  await db.destroy();
  await other.destroy();
  await bus.close();
  await nats.stop();
});

describe('projections', () => {
  it('applies a batch once: replaying it again changes nothing', async () => {
    const events = await history();
    expect(await applyBatch(db, events)).toBe(events.length);
    const before = await snapshotProjections(db);
    expect(await applyBatch(db, events)).toBe(0);
    expect(await applyBatch(db, events.slice(2))).toBe(0);
    expect(await snapshotProjections(db)).toEqual(before);
    expect(await readCheckpoint(db)).toBe(events[events.length - 1]!.seq);
  });

  it('projects status, exit code, failure and attempts, and keeps env values out', async () => {
    const a = await findJob(db, 'job_a');
    expect(a).toMatchObject({
      status: 'failed',
      exit_code: 3,
      owner: 'alice',
      env_names: ['SECRET_TOKEN'],
    });
    expect(a!.failure).toMatchObject({ kind: 'user', reason: 'nonZeroExit' });
    expect(JSON.stringify(a)).not.toContain('"x"');
    const attempts = await listAttempts(db, 'job_a');
    expect(attempts).toMatchObject([
      { number: 1, status: 'failed', exit_code: 3, worker_id: 'w1', gpus: [0] },
    ]);
    expect((await findJob(db, 'job_b'))!.status).toBe('running');
  });

  it('applies batches split anywhere to the same result as one batch', async () => {
    const events = await history();
    for (let i = 0; i < events.length; i += 3) await applyBatch(other, events.slice(i, i + 3));
    expect(await snapshotProjections(other)).toEqual(await snapshotProjections(db));
  });

  it('applies only the events past the checkpoint of a batch that overlaps it', async () => {
    const events = await history();
    const third = connectDb(await createTestDatabase(inject('pgUrl')));
    try {
      await migrate(third);
      expect(await applyBatch(third, events.slice(0, 4))).toBe(4);
      expect(await applyBatch(third, events)).toBe(events.length - 4);
      expect(await snapshotProjections(third)).toEqual(await snapshotProjections(db));
    } finally {
      await third.destroy();
    }
  });

  it('leaves nothing of a batch whose writes fail, and applies it once the fault is gone', async () => {
    const events = await history();
    const third = connectDb(await createTestDatabase(inject('pgUrl')));
    try {
      await migrate(third);
      await sql`create function refuse() returns trigger language plpgsql as
        $$ begin raise exception 'attempts refused'; end $$`.execute(third);
      await sql`create trigger refuse before insert on attempts
        for each row execute function refuse()`.execute(third);
      await expect(applyBatch(third, events)).rejects.toThrow('attempts refused');
      expect(await readCheckpoint(third)).toBe(0);
      expect(await third.selectFrom('jobs').selectAll().execute()).toEqual([]);
      await sql`drop trigger refuse on attempts`.execute(third);
      expect(await applyBatch(third, events)).toBe(events.length);
      expect(await snapshotProjections(third)).toEqual(await snapshotProjections(db));
    } finally {
      await third.destroy();
    }
  });

  it('rebuilds from the log to the same tables, and carries on after it', async () => {
    const live = await snapshotProjections(db);
    const result = await rebuildProjections(db, bus.store);
    expect(result.events).toBe((await history()).length);
    expect(await snapshotProjections(db)).toEqual(live);

    const snapshot = await loadJob(bus.store, 'job_b');
    const done = await runJobCommand(
      bus.store,
      'job_b',
      {
        type: 'FinishAttempt',
        attemptId: 'job_b_1',
        exit: { kind: 'exited', exitCode: 0 },
        durationMs: 5,
        now: new Date(),
        jitter: 0,
      },
      meta(),
      { snapshot },
    );
    expect(await applyBatch(db, done.events as StoredEvent<JobEvent>[])).toBe(1);
    expect((await findJob(db, 'job_b'))!.status).toBe('succeeded');
  });

  it('keeps a NUL or half a character an event carries as U+FFFD, rather than stop projecting', async () => {
    const fresh = connectDb(await createTestDatabase(inject('pgUrl')));
    try {
      await migrate(fresh);
      const emoji = '\u{1F600}';
      const half = emoji.slice(0, 1);
      const at = new Date();
      const events = [
        storedEvent(
          'job',
          'job_nul',
          {
            type: 'JobSubmitted',
            data: {
              owner: 'alice',
              spec: {
                ...spec,
                command: 'echo a\u0000b',
                kind: 'service',
                health: {
                  command: `true ${half}`,
                  intervalS: 15,
                  timeoutS: 5,
                  failures: 3,
                  graceS: 0,
                },
              },
            },
          },
          { seq: 1, at },
        ),
        storedEvent(
          'job',
          'job_nul',
          {
            type: 'JobAssigned',
            data: {
              attemptId: 'a1',
              attempt: 1,
              workerId: 'w1',
              gpus: [0],
              vramBytes: 1,
              cpus: 0,
              ports: [30_500],
            },
          },
          { seq: 2, at },
        ),
        storedEvent(
          'job',
          'job_nul',
          {
            type: 'JobAttemptFailed',
            data: {
              attemptId: 'a1',
              exitCode: 143,
              failure: {
                kind: 'user',
                reason: 'unhealthy',
                retryable: true,
                message: `said \u0000 ${emoji} ${half}`,
              },
              durationMs: 1,
              retry: null,
            },
          },
          { seq: 3, at },
        ),
      ];
      expect(await applyBatch(fresh, events)).toBe(3);
      const job = (await findJob(fresh, 'job_nul'))!;
      expect(job.command).toBe('echo a\uFFFDb');
      expect(job.health?.command).toBe('true \uFFFD');
      expect(job.failure?.message).toBe(`said \uFFFD ${emoji} \uFFFD`);
      expect((await listAttempts(fresh, 'job_nul'))[0]!.ports).toEqual([30_500]);
    } finally {
      await fresh.destroy();
    }
  });
});
