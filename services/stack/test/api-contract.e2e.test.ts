import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { TokenIssuer } from '@trainyard/api';
import {
  addUser,
  codeArchive,
  startTestStack,
  submit,
  type Job,
  type TestStack,
} from './harness.ts';

const SECRET = 'contract-test-secret-0123456789abcdef';
let t: TestStack;
let admin: string;

const cpuSpec = (over: object = {}) => ({
  name: 'contract',
  command: 'true',
  resources: { gpus: 0 },
  ...over,
});

interface Sse {
  event: string;
  id?: string;
  data: unknown;
}

/** Reads a log as server-sent events, whole, sending `lastId` to resume after it. */
async function logEvents(id: string, opts: { follow?: boolean; lastId?: string } = {}) {
  const res = await t.http(`/v1/jobs/${id}/logs${opts.follow ? '?follow=true' : ''}`, {
    token: admin,
    headers: {
      accept: 'text/event-stream',
      ...(opts.lastId && { 'last-event-id': opts.lastId }),
    },
  });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/event-stream');
  const events: Sse[] = [];
  for (const block of (await res.text()).split('\n\n')) {
    const fields = new Map<string, string>();
    for (const line of block.split('\n')) {
      const i = line.indexOf(': ');
      if (i > 0) fields.set(line.slice(0, i), line.slice(i + 2));
    }
    if (!fields.has('event')) continue;
    events.push({
      event: fields.get('event')!,
      ...(fields.has('id') && { id: fields.get('id')! }),
      data: JSON.parse(fields.get('data')!) as unknown,
    });
  }
  return events;
}

const text = (events: Sse[]) =>
  events
    .filter((e) => e.event === 'log')
    .map((e) => e.data as string)
    .join('');

beforeAll(async () => {
  t = await startTestStack({ jwtSecret: SECRET });
  admin = await t.token();
});

afterAll(async () => t?.stop());

describe('the API document', () => {
  it('is generated from the routes: every route, the spec, the statuses and the error codes', async () => {
    const res = await t.http('/docs/json');
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      openapi: string;
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
      components: { schemas: Record<string, { properties?: Record<string, { enum?: string[] }> }> };
    };
    expect(doc.openapi).toBe('3.1.0');
    for (const path of [
      '/v1/auth/login',
      '/v1/users',
      '/v1/jobs',
      '/v1/jobs/{id}',
      '/v1/jobs/{id}/cancel',
      '/v1/jobs/{id}/events',
      '/v1/jobs/{id}/logs',
      '/v1/jobs/{id}/outputs',
      '/v1/workers',
      '/v1/limits',
      '/healthz',
    ]) {
      expect(Object.keys(doc.paths), path).toContain(path);
    }
    expect(Object.keys(doc.paths['/v1/jobs']!.post!.responses)).toEqual(
      expect.arrayContaining(['202', '400', '401', '413', '500']),
    );
    expect(doc.components.schemas.Job!.properties!.status!.enum).toContain('estimating');
    const all = JSON.stringify(doc);
    for (const code of ['VALIDATION_FAILED', 'TOKEN_EXPIRED', 'PAYLOAD_TOO_LARGE', 'NOT_FOUND'])
      expect(all).toContain(code);
    expect(all).toContain('multipart/form-data');
  });

  it('is browsable at /docs', async () => {
    const res = await t.http('/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/html');
    expect(await res.text()).toContain('swagger-ui');
  });
});

describe('what the API refuses', () => {
  it('answers 400 for an image where jobs run on the host, a memory limit no job starts in, a bad image reference, or a field it does not know, and stores nothing', async () => {
    const before = (await (await t.http('/v1/jobs?limit=500', { token: admin })).json()) as Job[];
    const cases: [object, string][] = [
      [cpuSpec({ image: 'python:3.11' }), 'this cluster runs jobs on its workers’ hosts'],
      [cpuSpec({ resources: { gpus: 0, memoryGb: 0.001 } }), 'nothing starts in less'],
      [cpuSpec({ image: 'python\nRUN touch /x' }), 'an image reference'],
      [cpuSpec({ image: 'python;id' }), 'an image reference'],
      [cpuSpec({ gpu: 1 }), 'gpu'],
      [cpuSpec({ resources: { gpus: 0, vram: 3 } }), 'vram'],
    ];
    for (const [spec, words] of cases) {
      for (const res of [
        await submit(t, admin, spec),
        await t.http('/v1/jobs', {
          method: 'POST',
          token: admin,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(spec),
        }),
      ]) {
        expect(res.status, JSON.stringify(spec)).toBe(400);
        const body = (await res.json()) as { error: { code: string; message: string } };
        expect(body.error.code).toBe('VALIDATION_FAILED');
        expect(body.error.message).toContain(words);
      }
    }
    const after = (await (await t.http('/v1/jobs?limit=500', { token: admin })).json()) as Job[];
    expect(after.length).toBe(before.length);
  });

  it('tells an expired token from a bad one', async () => {
    const expired = await new TokenIssuer(SECRET, -60).issue({ username: 'admin', role: 'admin' });
    const res = await t.http('/v1/jobs', { token: expired });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('TOKEN_EXPIRED');
    const forged = await new TokenIssuer('another-secret-entirely-0123456789').issue({
      username: 'admin',
      role: 'admin',
    });
    const bad = await t.http('/v1/jobs', { token: forged });
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('UNAUTHENTICATED');
  });

  it('says what it accepts at /v1/limits', async () => {
    const res = await t.http('/v1/limits', { token: admin });
    expect(await res.json()).toEqual({ maxUploadBytes: 2 * 1024 ** 3, maxListLimit: 500 });
  });
});

describe('jobs, page by page', () => {
  it('hands out a cursor while more jobs follow, and the pages hold every job once', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await submit(t, admin, cpuSpec({ name: `page-${i}` }));
      ids.push(((await res.json()) as { id: string }).id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await t.http(
        `/v1/jobs?limit=2&after=${await t.stack.ctx.bus.store.lastSeq()}${cursor ? `&cursor=${cursor}` : ''}`,
        { token: admin },
      );
      seen.push(...((await res.json()) as Job[]).map((j) => j.id));
      cursor = res.headers.get('x-next-cursor');
      pages++;
    } while (cursor);
    expect(pages).toBeGreaterThanOrEqual(3);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).toEqual(expect.arrayContaining(ids));
    const bad = await t.http('/v1/jobs?cursor=bm9wZQ', { token: admin });
    expect(bad.status).toBe(400);
  });
});

describe('the log as server-sent events', () => {
  it('opens each attempt with who ran it, ids every chunk, and ends with the outcome', async () => {
    const code = await codeArchive({ 'run.sh': 'printf "héllo wörld\\n"; echo "bye"; exit 4\n' });
    const res = await submit(t, admin, cpuSpec({ command: 'sh run.sh' }), code);
    const { id } = (await res.json()) as { id: string };
    const events = await logEvents(id, { follow: true });
    const attempts = events.filter((e) => e.event === 'attempt').map((e) => e.data);
    expect(attempts).toEqual([
      { attempt: 0, build: true, workerId: null, gpus: [] },
      { attempt: 1, build: false, workerId: 'local', gpus: [] },
    ]);
    expect(text(events)).toContain('héllo wörld\nbye\n');
    expect(events.at(-1)).toEqual({
      event: 'end',
      data: expect.objectContaining({ status: 'failed', ended: true, exitCode: 4 }) as unknown,
    });
    const logs = events.filter((e) => e.event === 'log');
    expect(logs.every((e) => /^\d+:\d+$/.test(e.id ?? ''))).toBe(true);
    expect(events.some((e) => e.event === 'caught-up')).toBe(true);

    const first = text(logs.filter((e) => e.id!.startsWith('1:')));
    expect(first).toBe('héllo wörld\nbye\n');
    const resumed = await logEvents(id, { lastId: '1:3' });
    expect(resumed.filter((e) => e.event === 'attempt').map((e) => e.data)).toEqual([attempts[1]]);
    expect(text(resumed)).toBe(Buffer.from(first).subarray(3).toString());
  });

  it('keeps plain text for clients that do not ask for events', async () => {
    const code = await codeArchive({ 'run.sh': 'echo plain\n' });
    const { id } = (await (
      await submit(t, admin, cpuSpec({ command: 'sh run.sh' }), code)
    ).json()) as {
      id: string;
    };
    const res = await t.http(`/v1/jobs/${id}/logs?follow=true`, { token: admin });
    expect(res.headers.get('content-type')).toContain('text/plain');
    expect(await res.text()).toContain('plain\n');
  });
});

describe('changing a job’s priority', () => {
  it('lets its owner lower it, an admin raise it, and refuses the rest, changing nothing', async () => {
    const carol = await addUser(t, admin, 'carol', 'quiet-harbor-lantern-7');
    // After a job that sleeps: it waits.
    const sleeper = (await (
      await submit(t, carol, cpuSpec({ command: 'exec sleep 600' }))
    ).json()) as { id: string };
    onTestFinished(async () => {
      await t.http(`/v1/jobs/${sleeper.id}/cancel`, { method: 'POST', token: carol });
    });
    const res = await submit(t, carol, cpuSpec({ dependsOn: [sleeper.id] }));
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const patch = (token: string, body: object) =>
      t.http(`/v1/jobs/${id}`, {
        method: 'PATCH',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const codeOf = async (r: Response) =>
      ((await r.json()) as { error: { code: string } }).error.code;

    const lowered = await patch(carol, { priority: -5 });
    expect(lowered.status).toBe(200);
    const low = (await lowered.json()) as { seq: number };
    expect(low).toMatchObject({ id, priority: -5 });
    const raised = await patch(carol, { priority: 5 });
    expect(raised.status).toBe(403);
    expect(await codeOf(raised)).toBe('FORBIDDEN');
    for (const bad of [{ priority: 1.5 }, { priority: 5000 }, { priority: -1, other: 1 }, {}]) {
      const refused = await patch(carol, bad);
      expect(refused.status, JSON.stringify(bad)).toBe(400);
      expect(await codeOf(refused)).toBe('VALIDATION_FAILED');
    }
    const dave = await addUser(t, admin, 'dave', 'amber-canyon-falcon-3');
    expect((await patch(dave, { priority: -9 })).status).toBe(404);
    const job = async () =>
      (await (await t.http(`/v1/jobs/${id}?after=${low.seq}`, { token: carol })).json()) as Job & {
        priority: number;
      };
    expect((await job()).priority).toBe(-5);

    const byAdmin = await patch(admin, { priority: 50 });
    expect(byAdmin.status).toBe(200);
    const { seq } = (await byAdmin.json()) as { seq: number };
    const shown = (await (
      await t.http(`/v1/jobs/${id}?after=${seq}`, { token: carol })
    ).json()) as {
      priority: number;
    };
    expect(shown.priority).toBe(50);
    const events = (await (await t.http(`/v1/jobs/${id}/events`, { token: carol })).json()) as {
      type: string;
      data: unknown;
    }[];
    expect(events.filter((e) => e.type === 'JobPriorityChanged').map((e) => e.data)).toEqual([
      { priority: -5, previous: 0 },
      { priority: 50, previous: -5 },
    ]);

    expect((await t.http(`/v1/jobs/${id}/cancel`, { method: 'POST', token: carol })).status).toBe(
      202,
    );
    const late = await patch(admin, { priority: 1 });
    expect(late.status).toBe(409);
  });
});
