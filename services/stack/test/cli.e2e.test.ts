import { execFile } from 'node:child_process';
import { readFile, writeFile, mkdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { EMPTY_HEAD, EventSigner, EventStore, type EventSignature } from '@trainyard/events';
import { tempDir, waitFor } from '@trainyard/testkit';
import { ADMIN_PASSWORD, startTestStack, type TestStack } from './harness.ts';
import { runCli, type Run } from './processes.ts';

let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;

/** Runs the CLI as a user would, with its config under a private XDG_CONFIG_HOME. */
function cli(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 30_000): Promise<Run> {
  return runCli(args, {
    timeoutMs,
    env: {
      ...process.env,
      TRAINYARD_API_URL: t.url,
      XDG_CONFIG_HOME: join(work.path, 'config'),
      XDG_STATE_HOME: join(work.path, 'state'),
      TRAINYARD_NATS_URL: t.natsUrl,
      DATABASE_URL: t.databaseUrl,
      TRAINYARD_HOME: join(work.path, 'home'),
      ...env,
    },
  });
}

const project = () => join(work.path, 'project');

beforeAll(async () => {
  t = await startTestStack();
  work = await tempDir('trainyard-cli-');
  const code = project();
  await mkdir(join(code, 'data'), { recursive: true });
  await mkdir(join(code, 'src', 'cache'), { recursive: true });
  await writeFile(
    join(code, 'train.py'),
    'import os\nprint("hello from", os.environ["TRAINYARD_JOB_ID"], flush=True)\nopen(os.path.join(os.environ["TRAINYARD_OUTPUT_DIR"], "result.txt"), "w").write("42")\n',
  );
  await writeFile(join(code, '.gitignore'), 'data/\n*.log\n');
  await writeFile(join(code, '.trainyardignore'), 'secret.txt\n');
  await writeFile(join(code, 'secret.txt'), 'do not upload');
  await writeFile(join(code, 'run.log'), 'old log');
  await writeFile(join(code, 'data', 'big.bin'), 'x'.repeat(1000));
  await writeFile(join(code, 'src', 'model.py'), 'W = 1\n');
  await writeFile(join(code, 'src', '.gitignore'), 'cache/\n');
  await writeFile(join(code, 'src', 'cache', 'c.bin'), 'cached');
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('the trainyard CLI against a running stack', () => {
  let jobId = '';

  it('logs in, keeping the token under XDG_CONFIG_HOME readable by its owner alone', async () => {
    const bad = await cli(['login', '-u', 'admin', '-p', 'wrong']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('wrong username or password');
    const ok = await cli(['login', '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(ok.stdout).toContain(`logged in to ${t.url} as admin (admin)`);
    const file = join(work.path, 'config', 'trainyard', 'credentials.json');
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const saved = JSON.parse(await readFile(file, 'utf8')) as {
      profiles: Record<string, { token: string; apiUrl: string }>;
    };
    expect(saved.profiles.default!.token.split('.')).toHaveLength(3);
    expect(saved.profiles.default!.apiUrl).toBe(t.url);
  });

  it('shows what submit would pack, honouring .gitignore and .trainyardignore, with --dry-run', async () => {
    const r = await cli(['submit', project(), '--command', 'true', '--dry-run']);
    expect(r.code, r.stderr).toBe(0);
    const [packed, leftOut] = r.stdout.split('left out:');
    expect(packed).toMatch(/would upload 5 files/);
    for (const f of [
      'train.py',
      '.gitignore',
      '.trainyardignore',
      'src/.gitignore',
      'src/model.py',
    ])
      expect(packed).toContain(`  ${f}\n`);
    expect(leftOut).toContain('data/  (.gitignore)');
    expect(leftOut).toContain('run.log  (.gitignore)');
    expect(leftOut).toContain('secret.txt  (.trainyardignore)');
    expect(leftOut).toContain('src/cache/  (src/.gitignore)');
    expect(await cli(['ls', '--json'])).toMatchObject({ stdout: '[]\n' });
  });

  it('submits the directory, follows the log with a header per attempt and exits 0', async () => {
    const r = await cli([
      'submit',
      project(),
      '--command',
      'python3 train.py && find . -type f | sort',
      '--name',
      'cli-job',
      '--follow',
    ]);
    expect(r.code, `${r.stderr}\n${r.stdout}`).toBe(0);
    jobId = r.stdout.split('\n')[0]!.trim();
    expect(jobId).toMatch(/^job_/);
    expect(r.stdout).toContain('--- build ---\n');
    expect(r.stdout).toContain('--- attempt 1 on worker local (cpu) ---\n');
    expect(r.stdout).toContain(`hello from ${jobId}`);
    expect(r.stdout).toContain('./src/model.py');
    for (const gone of ['secret.txt', 'run.log', 'big.bin', 'c.bin'])
      expect(r.stdout).not.toContain(gone);
    expect(r.stderr).toContain('uploading code');
    expect(r.stderr).toContain(`job ${jobId} succeeded (exit 0)`);
  });

  it("exits with a failed job's exit code from submit --follow and logs -f", async () => {
    const r = await cli(['submit', project(), '--command', 'echo going; exit 3', '--follow']);
    expect(r.code).toBe(3);
    const id = r.stdout.split('\n')[0]!.trim();
    expect(r.stderr).toContain(`job ${id} failed (exit 3)`);
    const logs = await cli(['logs', id, '-f']);
    expect(logs.code).toBe(3);
    expect(logs.stdout).toMatch(
      /^--- build ---\n\[trainyard\] unpacked [^\n]*\n[^]*--- attempt 1 on worker local \(cpu\) ---\ngoing\n$/,
    );
    const plain = await cli(['logs', id]);
    expect(plain.code).toBe(0);
    expect(plain.stdout).toContain('going\n');
  });

  it('stops a job at its --time-limit, says why and exits 1; refuses a limit it cannot read and a --depends-on that cannot be met', async () => {
    const r = await cli([
      'submit',
      project(),
      '--command',
      'exec sleep 60',
      '--time-limit',
      '1s',
      '--follow',
    ]);
    expect(r.code).toBe(1);
    const id = r.stdout.split('\n')[0]!.trim();
    expect(r.stderr).toContain(
      `job ${id} failed: timeLimit: the attempt ran past the job's time limit of 1s`,
    );
    expect((await cli(['status', id])).stdout).toContain('time limit 1s an attempt');
    const bad = await cli(['submit', project(), '--command', 'true', '--time-limit', 'soon']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--time-limit: a duration such as 90s, 45m, 2h or 1h30m');
    const unknown = await cli([
      'submit',
      project(),
      '--command',
      'true',
      '--depends-on',
      'job_gone',
    ]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('--depends-on: job job_gone not found');
    const after = await cli(['submit', project(), '--command', 'true', '--depends-on', id]);
    expect(after.code).not.toBe(0);
    expect(after.stderr).toContain(`--depends-on: job ${id} failed`);
  });

  it('shows the queue in order, says why a job waits, and what each user holds', async () => {
    const sleeper = (await cli(['submit', project(), '--command', 'exec sleep 600'])).stdout.trim();
    onTestFinished(async () => void (await cli(['cancel', sleeper])));
    const after = (
      await cli(['submit', project(), '--command', 'true', '--depends-on', sleeper])
    ).stdout.trim();
    // Built first: it is queued once its build is done.
    const queue = await waitFor('it queued', async () => {
      const r = await cli(['queue']);
      return r.stdout.includes(`${after}  queued`) ? r : undefined;
    });
    expect(queue.code).toBe(0);
    expect(queue.stdout).toMatch(
      new RegExp(
        `^POS +ID +STATUS +PRIO +ASKS +REASON\n- +${after} +queued +0 +cpu 1 +dependency\n`,
      ),
    );
    const why = await cli(['why', after]);
    expect(why.stdout).toBe(`${after}: waiting for ${sleeper} to succeed\n`);
    expect((await cli(['status', after])).stdout).toContain(
      `waiting: waiting for ${sleeper} to succeed`,
    );
    await waitFor('the sleeper to run', async () =>
      (await cli(['why', sleeper])).stdout.includes('it is running'),
    );
    const all = await cli(['queue', '--all']);
    expect(all.stdout).toMatch(
      /holding now:\nUSER +GPUS +QUOTA +GPU-H +GPU-H QUOTA +CPUS +JOBS +SESSIONS\nadmin +0 +- +0 +- +1 +1 +0\n/,
    );
    await cli(['cancel', sleeper]);
    expect((await cli(['queue'])).stdout).toContain('nothing of yours waits');
  });

  it('submits the job a task file describes, with its directory, and names the line of a mistake', async () => {
    const dir = join(work.path, 'tasked');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'data.txt'), 'some data\n');
    const file = join(dir, 'trainyard.yaml');
    await writeFile(
      file,
      [
        '# a task file',
        'name: from-a-file',
        'command: \'echo "epochs=$EPOCHS token=$TOKEN"; ls\'',
        'resources:',
        '  gpus: 0',
        'timeLimit: 10m',
        'env:',
        '  EPOCHS: "3"',
        '',
      ].join('\n'),
    );
    const r = await cli(['submit', '-f', file, '--env', 'TOKEN=abc', '--follow']);
    expect(r.code, r.stderr).toBe(0);
    const id = r.stdout.split('\n')[0]!.trim();
    expect(r.stdout).toContain('epochs=3 token=abc');
    const twice = await cli(['submit', '-f', file, '--env', 'EPOCHS=4']);
    expect(twice.stderr).toContain(`--env EPOCHS: the task file ${file} sets it too`);
    expect(r.stdout).toContain('data.txt\ntrainyard.yaml\n');
    expect((await cli(['status', id])).stdout).toContain('from-a-file');
    expect((await cli(['status', id])).stdout).toContain('time limit 10m an attempt');

    await writeFile(file, 'command: echo hi\nresources:\n  gpus: 0\ndependsOn:\n  - job_gone\n');
    const server = await cli(['submit', '-f', file]);
    expect(server.code).not.toBe(0);
    expect(server.stderr).toContain(`${file}:5: dependsOn.0: job job_gone not found`);
    await writeFile(file, 'command: echo hi\nresources:\n  gpus: 0\n  gpu: 1\n');
    const local = await cli(['submit', '-f', file]);
    expect(local.stderr).toContain(`${file}:4: resources.gpu: Unrecognized key: "gpu"`);
    const both = await cli(['submit', '-f', file, '--gpus', '1']);
    expect(both.stderr).toContain(
      `--gpus: the task file ${file} gives the job's spec; give it there`,
    );
    const folder = await cli(['submit', '-f', dir]);
    expect(folder.stderr).toContain(`-f ${dir} is a directory: -f names a task file`);
    const neither = await cli(['submit', dir]);
    expect(neither.stderr).toContain('submit needs --command, or -f TASK_FILE');
  });

  it('takes env values from a file, so that secrets stay off the command line', async () => {
    const file = join(work.path, 'secrets.env');
    await writeFile(file, '# keys\nAPI_KEY=s3cr3t=with=equals\n\nOTHER=two\n');
    const r = await cli([
      'submit',
      project(),
      '--command',
      'echo "$API_KEY|$OTHER"',
      '--env-file',
      file,
      '--env',
      'OTHER=three',
      '--follow',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('s3cr3t=with=equals|three');
    await writeFile(file, 'not a pair\n');
    const bad = await cli(['submit', project(), '--command', 'true', '--env-file', file]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain(`--env-file ${file} wants NAME=VALUE, got "not a pair"`);
  });

  it('prints the last N lines with --tail', async () => {
    const r = await cli([
      'submit',
      project(),
      '--command',
      'for i in 1 2 3 4 5 6; do echo line $i; done',
      '--follow',
    ]);
    const id = r.stdout.split('\n')[0]!.trim();
    expect((await cli(['logs', id, '--tail', '2'])).stdout).toBe('line 5\nline 6\n');
    expect((await cli(['logs', id, '-f', '-n', '1'])).stdout).toBe('line 6\n');
  });

  it('lists, shows, prints logs and downloads outputs, checking each sha256', async () => {
    const ls = await cli(['ls']);
    expect(ls.stdout).toMatch(/^ID\s+OWNER\s+NAME/);
    expect(ls.stdout).toMatch(new RegExp(`${jobId}\\s+admin\\s+cli-job\\s+succeeded`));
    const status = await cli(['status', jobId]);
    expect(status.stdout).toContain('succeeded (exit 0)');
    expect(status.stdout).toMatch(/1\s+local\s+cpu\s+succeeded\s+0/);
    const outputs = await cli(['outputs', jobId]);
    expect(outputs.stdout).toContain('result.txt');
    const dl = await cli(['outputs', jobId, '--download', join(work.path, 'dl')]);
    expect(dl.code, dl.stderr).toBe(0);
    expect(dl.stdout).toContain('result.txt (2 B, sha256 ok)');
    expect(await readFile(join(work.path, 'dl', 'result.txt'), 'utf8')).toBe('42');
    const events = await cli(['events', jobId]);
    expect(events.stdout).toMatch(/JobSubmitted[\s\S]*JobSucceeded/);
    const workers = await cli(['workers']);
    expect(workers.stdout).toMatch(/local\s+online/);
  });

  it('prints JSON with --json on every command that prints data', async () => {
    const parse = async (args: string[]) => {
      const r = await cli([...args, '--json']);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
      return JSON.parse(r.stdout) as unknown;
    };
    expect(await parse(['ls'])).toEqual(
      expect.arrayContaining([expect.objectContaining({ id: jobId, status: 'succeeded' })]),
    );
    expect(await parse(['status', jobId])).toMatchObject({ id: jobId, owner: 'admin' });
    expect(await parse(['workers'])).toMatchObject([{ id: 'local', status: 'online' }]);
    expect(await parse(['outputs', jobId])).toMatchObject([{ path: 'result.txt', size: 2 }]);
    expect(await parse(['events', jobId])).toEqual(
      expect.arrayContaining([expect.objectContaining({ type: 'JobSucceeded' })]),
    );
    expect(await parse(['users', 'ls'])).toEqual(
      expect.arrayContaining([expect.objectContaining({ username: 'admin', role: 'admin' })]),
    );
    expect(await parse(['events', 'verify'])).toMatchObject({ broken: [] });
    const submitted = (await parse(['submit', project(), '--command', 'sleep 300'])) as {
      id: string;
    };
    expect(submitted).toMatchObject({ id: expect.stringMatching(/^job_/), status: 'submitted' });
    await t.waitForJob(submitted.id, await t.token(), (j) => j.status === 'running');
    expect(await parse(['cancel', submitted.id])).toMatchObject({
      id: submitted.id,
      cancelRequested: true,
    });
    await t.waitForJob(submitted.id, await t.token(), (j) => j.status === 'cancelled');
    const lines = (await cli(['logs', jobId, '--json'])).stdout.trim().split('\n');
    const kinds = lines.map((l) => (JSON.parse(l) as { type: string }).type);
    expect(kinds[0]).toBe('attempt');
    expect(kinds).toContain('log');
    expect(kinds.at(-1)).toBe('end');
  });

  it('keeps logins per --profile, and forgets one on logout', async () => {
    const other = await cli(['login', '--profile', 'second', '-u', 'admin', '-p', ADMIN_PASSWORD]);
    expect(other.stdout).toContain('in profile second');
    expect((await cli(['logout'])).stdout).toContain(`logged out of ${t.url} (admin)`);
    const after = await cli(['ls']);
    expect(after.code).not.toBe(0);
    expect(after.stderr).toContain(
      `not logged in to ${t.url}: run \`trainyard login --api ${t.url}\``,
    );
    expect((await cli(['ls', '--profile', 'second'])).code).toBe(0);
    expect((await cli(['logout'], { TRAINYARD_PROFILE: 'second' })).code).toBe(0);
    expect((await cli(['ls', '--profile', 'second'])).stderr).toContain('not logged in');
    expect((await cli(['logout'])).stdout).toBe('not logged in\n');
    await cli(['login', '-u', 'admin', '-p', ADMIN_PASSWORD]);
  });

  it('verifies every hash chain and signature and rebuilds the projections', async () => {
    const unkeyed = await cli(['events', 'verify']);
    expect(unkeyed.code).toBe(0);
    expect(unkeyed.stdout).toMatch(/\d+ events, \d+ chains, 0 broken\n/);
    expect(unkeyed.stderr).toContain('signatures not checked: no trusted key known');
    const verify = await cli(['events', 'verify'], { TRAINYARD_TRUSTED_KEYS: t.stack.publicKey });
    expect(verify.code, verify.stderr).toBe(0);
    expect(verify.stdout).toMatch(
      /\d+ events, \d+ chains, 0 broken, signatures checked against 1 trusted key\n/,
    );
    const before = await (await t.http(`/v1/jobs/${jobId}`, { token: await t.token() })).json();
    const rebuild = await cli(['projections', 'rebuild']);
    expect(rebuild.code).toBe(0);
    expect(rebuild.stdout).toMatch(/rebuilt from \d+ events/);
    await waitFor('the job after the rebuild', async () => {
      const res = await t.http(`/v1/jobs/${jobId}`, { token: await t.token() });
      return res.ok ? ((await res.json()) as object) : undefined;
    });
    expect(await (await t.http(`/v1/jobs/${jobId}`, { token: await t.token() })).json()).toEqual(
      before,
    );
  });

  it('makes a signing key with events keygen, printing the public key to trust', async () => {
    const made = await cli(['events', 'keygen', '--json']);
    expect(made.code, made.stderr).toBe(0);
    const key = JSON.parse(made.stdout) as { keyId: string; privateKey: string; publicKey: string };
    const signer = EventSigner.fromPrivateKey(key.privateKey);
    expect(signer.publicKey).toBe(key.publicKey);
    expect(signer.keyId).toBe(key.keyId);
    const env = await cli(['events', 'keygen']);
    expect(env.stdout).toMatch(/^TRAINYARD_SIGNING_KEY=\S+\nTRAINYARD_TRUSTED_KEYS=\S+\n$/);
  });

  it('completes commands and options in bash', async () => {
    const script = await cli(['completion', 'bash']);
    expect(script.code).toBe(0);
    const complete = (line: string) =>
      new Promise<string>((done, fail) => {
        const words = line.split(' ');
        execFile(
          'bash',
          [
            '-c',
            `${script.stdout}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _trainyard_complete; echo "\${COMPREPLY[*]}"`,
          ],
          (err, out) => (err ? fail(err) : done(out.trim())),
        );
      });
    expect(await complete('trainyard su')).toBe('submit');
    expect((await complete('trainyard ')).split(' ')).toEqual(
      expect.arrayContaining(['submit', 'logs', 'completion', 'logout', 'users']),
    );
    expect((await complete('trainyard logs job_x --t')).split(' ')).toEqual(['--tail']);
    expect(await complete('trainyard users c')).toBe('create');
    expect(await complete('npx trainyard su')).toBe('submit');
    expect(await complete('npx tr')).toBe('trainyard');
    expect((await complete('trainyard ls --')).split(' ')).toEqual(
      expect.arrayContaining(['--all', '--limit', '--json', '--profile', '--verbose']),
    );
    const zsh = await cli(['completion', 'zsh']);
    expect(zsh.stdout).toContain('bashcompinit');
    const fish = await cli(['completion', 'fish']);
    expect(fish.code).not.toBe(0);
    expect(fish.stderr).toContain('bash and zsh');
  });

  it('pages past 500 jobs with --limit and --all', async () => {
    const token = await t.token();
    const sleeper = (await (
      await t.http('/v1/jobs', {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'sleeps', command: 'exec sleep 600', resources: { gpus: 0 } }),
      })
    ).json()) as { id: string };
    onTestFinished(async () => {
      await t.http(`/v1/jobs/${sleeper.id}/cancel`, { method: 'POST', token });
    });
    // They wait for the sleeper: none runs.
    const waiting = {
      name: 'waits',
      command: 'true',
      resources: { gpus: 0 },
      dependsOn: [sleeper.id],
    };
    for (let batch = 0; batch < 21; batch++) {
      await Promise.all(
        Array.from({ length: 25 }, () =>
          t.http('/v1/jobs', {
            method: 'POST',
            token,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(waiting),
          }),
        ),
      );
    }
    const seq = await t.stack.ctx.bus.store.lastSeq();
    await waitFor(
      'the read model',
      async () => (await t.http(`/v1/jobs?after=${seq}&limit=1`, { token })).ok,
    );
    const some = JSON.parse((await cli(['ls', '--limit', '510', '--json'])).stdout) as unknown[];
    expect(some).toHaveLength(510);
    const all = JSON.parse((await cli(['ls', '--all', '--json'])).stdout) as { id: string }[];
    expect(all.length).toBeGreaterThanOrEqual(525);
    expect(new Set(all.map((j) => j.id)).size).toBe(all.length);
    const table = (await cli(['ls'])).stdout.trim().split('\n');
    expect(table).toHaveLength(51);
  });

  it("names events appended without the stack's key, by a foreign key, or with a stolen signature", async () => {
    const { js, jsm, store } = t.stack.ctx.bus;
    let genuine: EventSignature | undefined;
    for await (const e of store.replay()) genuine ??= e.signature;
    expect(genuine).toBeDefined();
    const forge = (signer: Pick<EventSigner, 'sign'> | null, username: string) =>
      new EventStore(js, jsm, signer as EventSigner | null).append({
        aggregate: 'user',
        aggregateId: username,
        head: EMPTY_HEAD,
        events: [{ type: 'UserCreated', data: { username, role: 'admin' } }],
        meta: { actor: { kind: 'user', id: 'admin' }, now: new Date() },
      });
    await forge(null, 'forged-bare');
    await forge(EventSigner.generate(), 'forged-foreign');
    await forge({ sign: () => genuine! }, 'forged-stolen');
    const trusted = { TRAINYARD_TRUSTED_KEYS: t.stack.publicKey };
    const verify = await cli(['events', 'verify'], trusted);
    expect(verify.code).toBe(2);
    expect(verify.stderr).toMatch(/BROKEN user\/forged-bare at seq \d+: unsigned \(/);
    expect(verify.stderr).toMatch(/BROKEN user\/forged-foreign at seq \d+: unknown-key \(/);
    expect(verify.stderr).toMatch(/BROKEN user\/forged-stolen at seq \d+: bad-signature \(/);
    expect(verify.stdout).toMatch(/ 3 broken, signatures checked/);
    const json = await cli(['events', 'verify', '--json'], trusted);
    expect(json.code).toBe(2);
    const report = JSON.parse(json.stdout) as {
      trustedKeys: number;
      broken: { aggregateId: string; problem: string }[];
    };
    expect(report.trustedKeys).toBe(1);
    expect(report.broken.map((b) => [b.aggregateId, b.problem])).toEqual([
      ['forged-bare', 'unsigned'],
      ['forged-foreign', 'unknown-key'],
      ['forged-stolen', 'bad-signature'],
    ]);
  });
});
