import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packDirectory } from '@trainyard/blobs';
import { tempDir, waitFor } from '@trainyard/testkit';
import { startTestStack, submit, type TestStack } from './harness.ts';
import { startService, type ServiceProcess } from './processes.ts';

let t: TestStack;
let token: string;
let scratch: Awaited<ReturnType<typeof tempDir>>;
const builders: ServiceProcess[] = [];
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
    const code = join(scratch.path, 'code');
    await mkdir(code, { recursive: true });
    await writeFile(join(code, 'train.sh'), 'echo built from $(ls | wc -l) files\n');
    await writeFile(join(code, 'weights.bin'), randomBytes(48 * 1024 * 1024));
    const archive = join(scratch.path, 'code.tar.gz');
    await pipeline(packDirectory(code), createWriteStream(archive));
    const res = await submit(
      t,
      token,
      { name: 'slow-build', command: 'sh train.sh', resources: { gpus: 0 } },
      await readFile(archive),
    );
    const { id } = (await res.json()) as { id: string };
    await waitFor(
      'the first builder to claim the build',
      async () => (await t.stack.ctx.bus.store.last('job', id))?.type === 'JobBuildStarted',
      { intervalMs: 5, timeoutMs: 30_000 },
    );
    process.kill(first.child.pid!, 'SIGSTOP');
    const last = await t.stack.ctx.bus.store.last('job', id);
    expect(last?.type, 'the build ended before its builder could be stopped').toBe(
      'JobBuildStarted',
    );
    await first.kill9();

    builder();
    const job = await t.waitForJob(id, token, (j) => j.status === 'succeeded', 60_000);
    expect(job.exitCode).toBe(0);
    const events = (await (await t.http(`/v1/jobs/${id}/events`, { token })).json()) as {
      type: string;
      data: { builderId?: string };
    }[];
    const claims = events.filter((e) => e.type === 'JobBuildStarted').map((e) => e.data.builderId);
    expect(claims).toHaveLength(2);
    expect(claims[0]).not.toBe(claims[1]);
    expect(await (await t.http(`/v1/jobs/${id}/logs`, { token })).text()).toContain(
      'built from 2 files',
    );
  });
});
