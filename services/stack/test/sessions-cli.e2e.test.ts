import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '@trainyard/testkit';
import { SimulatedInventory } from '@trainyard/runtime';
import { addUser, startTestStack, submit, type TestStack } from './harness.ts';
import { sshKeygen } from './ssh.ts';
import { runCli, runProgram, type Run } from './processes.ts';

/**
 * The session and SSH key commands of the real `trainyard` binary against a whole stack, and
 * `trainyard ssh` through the stack's gateway with the system `ssh`.
 */
let t: TestStack;
let work: Awaited<ReturnType<typeof tempDir>>;

const PASSWORD = 'tundra-lagoon-sparrow-3';

const home = () => join(work.path, 'home');
const config = () => join(work.path, 'config', 'trainyard');

/** Runs the CLI as a user would, with a home and a config directory of its own. */
function cli(args: string[], timeoutMs = 30_000): Promise<Run> {
  return runCli(args, {
    timeoutMs,
    env: {
      ...process.env,
      HOME: home(),
      TRAINYARD_API_URL: t.url,
      XDG_CONFIG_HOME: join(work.path, 'config'),
      XDG_STATE_HOME: join(work.path, 'state'),
      TRAINYARD_HOME: join(work.path, 'trainyard'),
    },
  });
}

/** Runs a program with the same home. */
const run = (file: string, args: string[]) =>
  runProgram(file, args, { env: { ...process.env, HOME: home() } });

const keygen = (file: string, type: string, bits?: number) =>
  sshKeygen(file, type, { comment: 'carol@laptop', ...(bits && { bits }) });

let admin: string;

beforeAll(async () => {
  t = await startTestStack({ inventory: SimulatedInventory.parse('1x24GiB') });
  work = await tempDir('trainyard-session-cli-');
  await mkdir(join(home(), '.ssh'), { recursive: true, mode: 0o700 });
  admin = await t.token();
  await addUser(t, admin, 'carol', PASSWORD);
  expect((await cli(['login', '-u', 'carol', '-p', PASSWORD])).code).toBe(0);
});

afterAll(async () => {
  await t?.stop();
  await work?.remove();
});

describe('trainyard session', () => {
  it('creates, lists, shows and stops a session, and names the flag a refusal is about', async () => {
    const never = await cli(['session', 'create', '--gpus', '2']);
    expect(never.code).toBe(1);
    expect(never.stderr).toContain('no registered worker could ever run this session');
    // The one GPU is taken: the session waits in the queue.
    const sleeper = (
      (await (
        await submit(t, admin, {
          name: 'gpu',
          command: 'sleep 60',
          resources: { gpus: 1, vramGb: 4 },
        })
      ).json()) as { id: string }
    ).id;
    await t.waitForJob(sleeper, admin, (j) => j.status === 'running', 30_000);
    const made = await cli([
      'session',
      'create',
      '--gpus',
      '1',
      '--name',
      'nb',
      '--idle-min',
      '45',
    ]);
    expect(made.code, made.stderr).toBe(0);
    const id = made.stdout.trim();
    expect(id).toMatch(/^ses_[0-9a-z]{22}$/);

    const ls = await cli(['session', 'ls']);
    expect(ls.stdout).toMatch(new RegExp(`${id}\\s+nb\\s+queued\\s+1\\s`));
    const listed = JSON.parse((await cli(['session', 'ls', '--json'])).stdout) as {
      id: string;
      timers: object;
    }[];
    expect(listed.find((s) => s.id === id)?.timers).toEqual({
      connectMin: 10,
      idleMin: 45,
      maxMin: 360,
    });
    const show = await cli(['session', 'show', id]);
    expect(show.stdout).toContain(`${id}  nb  queued\n`);
    expect(show.stdout).toContain('timers: connect 10 min, idle 45 min, max 360 min');

    const capped = await cli(['session', 'create', '--gpus', '1', '--max-min', '2000']);
    expect(capped.code).toBe(1);
    expect(capped.stderr).toContain('error: --max-min: at most 1440 minutes');
    const bad = await cli(['session', 'create', '--gpus', 'two']);
    expect(bad.stderr).toContain('--gpus wants a number, got "two"');

    const early = await cli(['ssh', id, '--', 'true']);
    expect(early.code).toBe(1);
    expect(early.stderr).toContain(`session ${id} is queued: only a running session`);
    expect(early.stderr).toContain(`trainyard session show ${id}`);

    const stopped = await cli(['session', 'stop', id]);
    expect(stopped.stdout).toBe(`${id} stopped\n`);
    const again = await cli(['session', 'stop', id]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('SESSION_ENDED');
    expect((await cli(['session', 'show', id])).stdout).toContain('stopped (user)');
    await t.http(`/v1/jobs/${sleeper}/cancel`, { method: 'POST', token: admin });
  });
});

describe('trainyard ssh-key', () => {
  it('adds the default key, lists it and removes it; refuses short and private keys', async () => {
    const fp = keygen(join(home(), '.ssh', 'id_ed25519'), 'ed25519');
    const added = await cli(['ssh-key', 'add']);
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toBe(`added ${fp} (ssh-ed25519, carol@laptop)\n`);
    const twice = await cli(['ssh-key', 'add']);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain('SSH_KEY_EXISTS');

    const short = join(work.path, 'short');
    keygen(short, 'rsa', 1024);
    const refused = await cli(['ssh-key', 'add', `${short}.pub`]);
    expect(refused.stderr).toContain(`${short}.pub: an RSA key of 1024 bits is too short`);
    const secret = await cli(['ssh-key', 'add', short]);
    expect(secret.stderr).toContain(`${short} is a private key`);
    const missing = await cli(['ssh-key', 'add', join(work.path, 'nope.pub')]);
    expect(missing.stderr).toContain('nope.pub: no such file');

    const ls = await cli(['ssh-key', 'ls']);
    expect(ls.stdout).toMatch(
      new RegExp(`${fp.replace(/[+/]/g, '\\$&')}\\s+ssh-ed25519\\s+carol@laptop`),
    );
    const removed = await cli(['ssh-key', 'rm', fp]);
    expect(removed.stdout).toBe(`removed ${fp}\n`);
    expect(JSON.parse((await cli(['ssh-key', 'ls', '--json'])).stdout)).toEqual([]);
    const gone = await cli(['ssh-key', 'rm', fp]);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain(`you have no key ${fp}`);
  });
});

describe('trainyard ssh', () => {
  it('runs a command in a running session with the one-time password, pinning the host key, and exits with its status', async () => {
    const made = await cli(
      ['session', 'create', '--name', 'box', '--follow-until-running'],
      60_000,
    );
    expect(made.code, made.stderr).toBe(0);
    const id = made.stdout.trim();
    expect(made.stderr).toContain(`${id} running`);

    const r = await cli(['ssh', id, '--', 'echo hello-from-session; exit 3']);
    expect(r.stdout, r.stderr).toContain('hello-from-session');
    expect(r.code).toBe(3);
    const token = await t.token('carol', PASSWORD);
    const gateway = (await (await t.http('/v1/ssh-gateway', { token })).json()) as {
      hostKey: string;
      port: number;
    };
    expect(gateway.port).toBe(t.stack.gateway!.port);
    const pinned = readFileSync(join(config(), 'known_hosts'), 'utf8');
    expect(pinned).toBe(
      `[127.0.0.1]:${gateway.port} ${gateway.hostKey.split(' ').slice(0, 2).join(' ')}\n`,
    );

    const printed = await cli(['ssh-config']);
    expect(printed.stdout).toContain(
      `Host box ${id}\n  HostName 127.0.0.1\n  Port ${gateway.port}\n  User ${id}\n  UserKnownHostsFile ${join(config(), 'known_hosts')}\n`,
    );
    const written = await cli(['ssh-config', '--write']);
    expect(written.stdout).toContain(`Include ${join(config(), 'ssh_config')}`);
    expect(existsSync(join(config(), 'ssh_config'))).toBe(true);

    // The written config takes the system ssh to the session by name, with a registered key.
    const key = join(home(), '.ssh', 'box_key');
    keygen(key, 'ed25519');
    expect((await cli(['ssh-key', 'add', `${key}.pub`])).code).toBe(0);
    const byName = await run('ssh', [
      '-F',
      join(config(), 'ssh_config'),
      '-o',
      'BatchMode=yes',
      '-o',
      'IdentityAgent=none',
      '-o',
      'IdentitiesOnly=yes',
      '-i',
      key,
      'box',
      'echo by-name',
    ]);
    expect(byName.stdout, byName.stderr).toBe('by-name\n');
    expect((await cli(['session', 'stop', id])).code).toBe(0);
  });

  it("unpacks the directory a session was created from in its home, the session's own", async () => {
    const code = join(work.path, 'project');
    await mkdir(join(code, 'notes'), { recursive: true });
    writeFileSync(join(code, 'notes', 'hello.txt'), 'packed with the session\n');
    writeFileSync(join(code, 'secret.env'), 'TOKEN=left-behind\n');
    writeFileSync(join(code, '.trainyardignore'), 'secret.env\n');
    const refused = await cli(['session', 'create', code, '--gpus', 'many']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('--gpus');
    const missing = await cli(['session', 'create', join(work.path, 'nowhere')]);
    expect(missing.stderr).toContain('is not a directory');

    const made = await cli(['session', 'create', code, '--follow-until-running'], 60_000);
    expect(made.code, made.stderr).toBe(0);
    const id = made.stdout.trim();
    const r = await cli([
      'ssh',
      id,
      '--',
      'cat notes/hello.txt; ls -A; [ "$(stat -c %u notes/hello.txt)" = "$(id -u)" ] && echo owned',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('packed with the session\n.trainyardignore\nnotes\nowned\n');
    expect((await cli(['session', 'stop', id])).code).toBe(0);
  });
});
