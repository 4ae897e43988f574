import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '@trainyard/testkit';
import { codeArchive, startTestStack, submit, type Job, type TestStack } from './harness.ts';

const asRoot = process.getuid?.() === 0;
let t: TestStack;
let token: string;

const cpuSpec = (command: string, over: object = {}) => ({
  name: 'isolation',
  command,
  resources: { gpus: 0 },
  ...over,
});

async function run(command: string, over: object = {}, files: Record<string, string> = {}) {
  const code = Object.keys(files).length ? await codeArchive(files) : undefined;
  const res = await submit(t, token, cpuSpec(command, over), code);
  expect(res.status).toBe(202);
  const { id } = (await res.json()) as { id: string };
  return id;
}

async function finished(id: string): Promise<{ job: Job; log: string }> {
  const job = await t.waitForJob(id, token, (j) => ['succeeded', 'failed'].includes(j.status));
  const log = await (await t.http(`/v1/jobs/${id}/logs`, { token })).text();
  return { job, log };
}

/** The uids of every process running now. */
function uidsRunning(): Map<number, number[]> {
  const byUid = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = readFileSync(`/proc/${entry}/status`, 'utf8');
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
      byUid.set(uid, [...(byUid.get(uid) ?? []), Number(entry)]);
    } catch {
      continue;
    }
  }
  return byUid;
}

beforeAll(async () => {
  if (!asRoot) return;
  t = await startTestStack();
  token = await t.token();
});

afterAll(async () => t?.stop());

describe.runIf(asRoot)('a job, as the worker runs it', () => {
  it('runs as an unprivileged uid of its own, with no groups, as does its setup, named in USER', async () => {
    const command = [
      'echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"',
      'cat setup-uid.txt',
      `python3 -c 'import getpass; print("getuser=" + getpass.getuser())'`,
    ];
    const id = await run(command.join('; '), { setup: 'id -u > setup-uid.txt' });
    const { job, log } = await finished(id);
    expect(job.status, log).toBe('succeeded');
    const uid = Number(/uid=(\d+)/.exec(log)?.[1]);
    expect(uid).toBeGreaterThanOrEqual(2_000_000);
    expect(log).toContain(`gid=${uid} groups=${uid}`);
    expect(log).toContain('[trainyard] running setup');
    expect(log).toMatch(new RegExp(`\\n${uid}\\n`));
    expect(log).toContain(`getuser=trainyard-${uid}\n`);
  });

  it('fails as the user’s own when its setup fails, and never runs the command', async () => {
    const id = await run('echo the-command-ran', { setup: 'echo setting up; exit 4' });
    const { job, log } = await finished(id);
    expect(job.failure).toMatchObject({ kind: 'user', reason: 'setupFailed' });
    expect(job.failure!.message).toContain('setup exited with code 4');
    expect(log).toContain('setting up');
    expect(log).not.toContain('the-command-ran');
  });

  it('cannot read, list or signal another job, the worker, or the stack’s state', async () => {
    const victim = await run('echo hidden > secret.txt; sleep 300', {
      env: { VICTIM_SECRET: 'swordfish-4242' },
    });
    const held = await t.waitForJob(victim, token, (j) => j.status === 'running');
    const victimDir = join(t.sandboxes, `${victim}-1`);
    await waitFor('the victim’s secret file', () =>
      readdirSync(join(victimDir, 'work')).includes('secret.txt'),
    );
    const victimPid = Number(readFileSync(join(victimDir, 'attempt.pid'), 'utf8'));
    const probes = [
      `cat ${victimDir}/work/secret.txt`,
      `cat ${victimDir}/attempt.sh`,
      `cat ${victimDir}/attempt.log`,
      `ls ${victimDir}/work`,
      `ls ${t.sandboxes}`,
      `ls ${t.home}`,
      `cat /proc/${process.pid}/environ`,
      `cat /proc/${victimPid}/environ`,
      `kill -0 ${process.pid}`,
      `kill -0 ${victimPid}`,
      `test -d /proc/${process.pid}`,
      `grep -qs correct-horse /proc/[0-9]*/cmdline`,
      `(for d in $(echo "$PATH" | tr : ' '); do [ -w "$d" ] && exit 0; done; exit 1)`,
      `echo 1 > ../attempt.pid`,
      `echo 'status 0' > ../attempt.exit`,
    ];
    const control = `cat /etc/hostname >/dev/null 2>&1 && ls "$TRAINYARD_OUTPUT_DIR" >/dev/null && echo "control got through"`;
    const script = [
      control,
      ...probes.map(
        (p, i) =>
          `if ${p} >/dev/null 2>&1; then echo "probe ${i + 1} got through"; else echo "probe ${i + 1} refused"; fi`,
      ),
    ].join('\n');
    const prober = await run('sh probe.sh', {}, { 'probe.sh': `${script}\n` });
    const { job, log } = await finished(prober);
    expect(job.status, log).toBe('succeeded');
    expect(log).toContain('control got through');
    for (let i = 1; i <= probes.length; i++)
      expect(log, probes[i - 1]).toContain(`probe ${i} refused`);
    expect(log).not.toContain('swordfish-4242');
    expect(held.attempts[0]!.status).toBe('running');
    await t.http(`/v1/jobs/${victim}/cancel`, { method: 'POST', token });
    await t.waitForJob(victim, token, (j) => j.status === 'cancelled');
  });

  it('has a /tmp of its own, gone when it ends', async () => {
    const first = await run('echo mine > /tmp/left-behind; ls /tmp');
    expect((await finished(first)).log).toContain('left-behind');
    const second = await run('test -e /tmp/left-behind && echo found || echo clean');
    const { log } = await finished(second);
    expect(log).toContain('clean');
    expect(() => readFileSync('/tmp/left-behind')).toThrow();
  });

  it('leaves no process behind, not even one that left its process group', async () => {
    const id = await run('setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo "uid=$(id -u)"');
    const { job, log } = await finished(id);
    expect(job.status).toBe('succeeded');
    const uid = Number(/uid=(\d+)/.exec(log)?.[1]);
    await waitFor('the escaped sleep to be ended', () => !uidsRunning().has(uid), {
      timeoutMs: 10_000,
    });
  });

  it('cannot make the worker upload a file it may not read through a link in its outputs', async () => {
    const id = await run(
      'ln -s /etc/shadow "$TRAINYARD_OUTPUT_DIR/shadow"; mkdir -p "$TRAINYARD_OUTPUT_DIR/d"; ln -s /root "$TRAINYARD_OUTPUT_DIR/d/home"; echo ok > "$TRAINYARD_OUTPUT_DIR/real.txt"',
    );
    const { job } = await finished(id);
    expect(job.status).toBe('succeeded');
    const outputs = (await (await t.http(`/v1/jobs/${id}/outputs`, { token })).json()) as {
      path: string;
    }[];
    expect(outputs.map((o) => o.path)).toEqual(['real.txt']);
  });
});

describe.runIf(asRoot)('a job on the embedded stack', () => {
  it('finds no way into its NATS or its PostgreSQL', async () => {
    const own = await startTestStack({ ownPostgres: true });
    try {
      const natsPort = new URL(own.natsUrl.replace(/\/\/[^@]*@/, '//')).port;
      const pgPort = new URL(own.databaseUrl).port;
      expect(own.natsUrl).toMatch(/^nats:\/\/control:[^@]+@/);
      expect(own.databaseUrl).toMatch(/^postgres:\/\/postgres:[^@]+@/);
      const probe = [
        'import socket',
        `s = socket.create_connection(("127.0.0.1", ${natsPort}))`,
        's.recv(4096)',
        's.sendall(b"CONNECT {\\"verbose\\":true}\\r\\nPING\\r\\n")',
        'print("nats said:", s.recv(4096).decode().strip())',
      ].join('\n');
      const admin = await own.token();
      const code = await codeArchive({ 'probe.py': `${probe}\n` });
      const res = await submit(
        own,
        admin,
        cpuSpec(
          `python3 probe.py; psql -h 127.0.0.1 -p ${pgPort} -U postgres -w -c 'select 1' postgres 2>&1 | head -1`,
        ),
        code,
      );
      const { id } = (await res.json()) as { id: string };
      await own.waitForJob(id, admin, (j) => ['succeeded', 'failed'].includes(j.status));
      const log = await (await own.http(`/v1/jobs/${id}/logs`, { token: admin })).text();
      expect(log).toMatch(/nats said: -ERR 'Authorization Violation'/);
      expect(log).toMatch(/password authentication failed|no password supplied/);
    } finally {
      await own.stop();
    }
  });
});
