import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type TestStack } from './harness.ts';
import { startService, type ServiceProcess } from './processes.ts';

let t: TestStack;
let token: string;
let scratch: Awaited<ReturnType<typeof tempDir>>;
const builders: ServiceProcess[] = [];
const groupAlive = (pgid: number) => {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
};
const setupPid = async (marker: string) =>
  Number((await readFile(marker, 'utf8').catch(() => '')).trim());

function builder(): ServiceProcess {
  const b = startService(['builder'], {
    TRAINYARD_NATS_URL: t.natsUrl,
    TRAINYARD_LIVENESS_TTL_MS: '1500',
  });
  builders.push(b);
  return b;
}

beforeAll(async () => {
  t = await startTestStack({ without: ['builder'] });
  token = await t.token();
  scratch = await tempDir('trainyard-builder-');
});

afterAll(async () => {
  for (const b of builders) await b.kill9();
  await t?.stop();
  await scratch?.remove();
});

describe('a builder killed mid-build', () => {
  it('leaves the build to the next builder, which takes it over once the first is gone', async () => {
    const first = builder();
    const marker = join(scratch.path, 'first-setup.pid');
    const code = await codeArchive({ 'train.sh': 'cat built.txt\n' });
    const res = await submit(
      t,
      token,
      {
        name: 'slow-build',
        command: 'sh train.sh',
        setup: `if [ -f ${marker} ]; then echo rebuilt > built.txt; else echo $$ > ${marker}; exec sleep 300; fi`,
        resources: { gpus: 0 },
      },
      code,
    );
    const { id } = (await res.json()) as { id: string };
    await t.waitForJob(id, token, (j) => j.status === 'building', 20_000);
    const orphan = await waitFor(
      'the first setup to start',
      async () => (await setupPid(marker)) || undefined,
    );
    await first.kill9();
    await waitFor('the first setup to end with its builder', () => !groupAlive(orphan), {
      timeoutMs: 5_000,
    });

    builder();
    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 30_000);
    expect(job.exitCode).toBe(0);
    const events = (await (await t.http(`/v1/jobs/${id}/events`, { token })).json()) as {
      type: string;
      data: { builderId?: string };
    }[];
    const claims = events.filter((e) => e.type === 'JobBuildStarted').map((e) => e.data.builderId);
    expect(claims).toHaveLength(2);
    expect(claims[0]).not.toBe(claims[1]);
    expect(await (await t.http(`/v1/jobs/${id}/logs`, { token })).text()).toContain('rebuilt');
  });
});
