import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPostgres, type ChildServer } from '@trainyard/servers';
import { waitFor } from '@trainyard/testkit';
import { startTestStack, submit, type Job, type TestStack } from './harness.ts';

let t: TestStack;
let token: string;
let restarted: ChildServer | null = null;

beforeAll(async () => {
  t = await startTestStack({ ownPostgres: true });
  token = await t.token();
});

afterAll(async () => {
  await restarted?.stop();
  await t?.stop();
});

describe('PostgreSQL going away', () => {
  it('keeps accepting commands, answers reads with 503, and catches up when it returns', async () => {
    const pg = t.stack.children.find((c) => c.url.startsWith('postgres:'))!;
    await pg.stop();

    const res = await submit(t, token, {
      name: 'while-down',
      command: 'echo ran',
      resources: { gpus: 0 },
    });
    expect(res.status).toBe(202);
    const { id, seq } = (await res.json()) as { id: string; seq: number };

    const read = await t.http(`/v1/jobs/${id}`, { token });
    expect(read.status).toBe(503);
    expect((await t.http(`/v1/jobs/${id}/outputs`, { token })).status).toBe(503);
    expect(((await read.json()) as { error: { code: string } }).error.code).toBe(
      'PROJECTIONS_UNAVAILABLE',
    );
    expect(await (await t.http('/healthz')).json()).toMatchObject({
      status: 'degraded',
      nats: true,
      postgres: false,
    });
    const events = (await (await t.http(`/v1/jobs/${id}/events`, { token })).json()) as {
      type: string;
    }[];
    expect(events[0]!.type).toBe('JobSubmitted');

    const cancelMe = (
      (await (
        await submit(t, token, { name: 'gpu', command: 'true', resources: { gpus: 1, vramGb: 1 } })
      ).json()) as {
        id: string;
      }
    ).id;
    expect((await t.http(`/v1/jobs/${cancelMe}/cancel`, { method: 'POST', token })).status).toBe(
      202,
    );

    await waitFor('the job to run while the read side is down', async () => {
      const list = (await (await t.http(`/v1/jobs/${id}/events`, { token })).json()) as {
        type: string;
      }[];
      return list.some((e) => e.type === 'JobSucceeded');
    });

    const port = Number(new URL(t.databaseUrl).port);
    restarted = await startPostgres({ dir: join(t.home, 'postgres'), port, fast: true });
    const lastSeq = await t.stack.ctx.bus.store.lastSeq();
    expect(lastSeq).toBeGreaterThan(seq);
    const job = await waitFor(
      'the projections to catch up',
      async () => {
        const r = await t.http(`/v1/jobs/${id}?after=${lastSeq}`, { token });
        return r.ok ? ((await r.json()) as Job) : undefined;
      },
      { timeoutMs: 20_000 },
    );
    expect(job.status).toBe('succeeded');
    expect((await t.waitForJob(cancelMe, token, (j) => j.status === 'cancelled')).status).toBe(
      'cancelled',
    );
  });
});
