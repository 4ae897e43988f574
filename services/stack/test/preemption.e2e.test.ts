import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedInventory } from '@trainyard/runtime';
import { tempDir } from '@trainyard/testkit';
import { addUser, startTestStack, submit, type TestStack } from './harness.ts';
import { cliEnv, runCli } from './processes.ts';

let t: TestStack;
let alice: string;
let work: Awaited<ReturnType<typeof tempDir>>;

beforeAll(async () => {
  t = await startTestStack({ inventory: SimulatedInventory.parse('1x24GiB') });
  work = await tempDir('trainyard-preemption-');
  alice = await addUser(t, await t.token(), 'alice', 'preemption-keeper-1066');
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

/**
 * Trains until stopped, then takes half a second to save its checkpoint, under a shell that the
 * stop ends at once; or, resumed, says where it picks up.
 */
const SAVE_ON_TERM = [
  '$SIG{TERM} = sub { select undef, undef, undef, 0.5;',
  'open my $f, ">", "$ENV{TRAINYARD_OUTPUT_DIR}/step" or die; print $f "7\\n"; close $f; exit 0 };',
  'sleep 300',
].join(' ');
const TRAIN = [
  'if [ -n "$TRAINYARD_RESUMED" ]; then',
  '  echo "resumed at step $(cat "$TRAINYARD_OUTPUT_DIR/step")";',
  'else',
  `  echo training; perl -e '${SAVE_ON_TERM}'; true;`,
  'fi',
].join(' ');

describe('preemption through the stack', () => {
  it('stops a preemptible job for one of a higher priority, then resumes it from its outputs', async () => {
    const dir = join(work.path, 'empty');
    await mkdir(dir, { recursive: true });
    const env = cliEnv(t.url, alice, work.path);
    const flags = ['--gpus', '1', '--vram-gb', '20', '--priority', '-5', '--max-retries', '0'];
    const sent = await runCli(
      ['submit', dir, '--name', 'low', '--command', TRAIN, ...flags, '--preemptible', '--json'],
      { env },
    );
    expect(sent.code, sent.stderr).toBe(0);
    const low = (JSON.parse(sent.stdout) as { id: string }).id;
    await t.waitForJob(low, alice, (j) => j.status === 'running', 30_000);
    const shown = await runCli(['status', low], { env });
    expect(shown.stdout).toContain('preemptible: work of a higher priority may stop it');

    const urgentSpec = {
      name: 'urgent',
      command: 'echo urgent',
      resources: { gpus: 1, vramGb: 20 },
    };
    const urgent = ((await (await submit(t, alice, urgentSpec)).json()) as { id: string }).id;
    const ran = await t.waitForJob(urgent, alice, (j) => j.status === 'succeeded', 30_000);
    const done = await t.waitForJob(low, alice, (j) => j.status === 'succeeded', 30_000);

    expect(done.attempts.map((a) => [a.status, a.failure?.reason ?? null])).toEqual([
      ['failed', 'preempted'],
      ['succeeded', null],
    ]);
    expect(Date.parse(done.attempts[1]!.startedAt!)).toBeGreaterThanOrEqual(
      Date.parse(ran.attempts[0]!.startedAt!),
    );
    const log = await (await t.http(`/v1/jobs/${low}/logs`, { token: alice })).text();
    expect(log).toContain('resumed at step 7');
    const events = (await (await t.http(`/v1/jobs/${low}/events`, { token: alice })).json()) as {
      type: string;
      data: { by?: string };
    }[];
    expect(events.filter((e) => e.type === 'JobPreempted').map((e) => e.data.by)).toEqual([urgent]);
  });

  it('leaves alone a job that is not preemptible', async () => {
    const spec = (name: string, priority: number, command: string) => ({
      name,
      command,
      priority,
      resources: { gpus: 1, vramGb: 20 },
    });
    const fixed = (
      (await (await submit(t, alice, spec('fixed', -5, 'exec sleep 300'))).json()) as {
        id: string;
      }
    ).id;
    await t.waitForJob(fixed, alice, (j) => j.status === 'running', 30_000);
    const waits = (
      (await (await submit(t, alice, spec('waits', 0, 'true'))).json()) as {
        id: string;
      }
    ).id;
    const waiting = await t.waitForJob(
      waits,
      alice,
      (j) => (j as { pendingReason?: string | null }).pendingReason === 'resources',
    );
    expect(waiting.status).toBe('queued');
    expect((await t.waitForJob(fixed, alice, () => true)).status).toBe('running');
    const cancel = await t.http(`/v1/jobs/${fixed}/cancel`, { method: 'POST', token: alice });
    expect(cancel.status).toBe(202);
    await t.waitForJob(waits, alice, (j) => j.status === 'succeeded', 30_000);
  });
});
