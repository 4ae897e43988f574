import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ssh2, { type ParsedKey, type PublicKeyAuthMethod } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Channel, ChannelRefused, type ChannelRequest } from '@trainyard/tunnel';
import {
  type GatewayDeps,
  type LoginAttempt,
  type LoginDecision,
  type SessionRoute,
  SshGateway,
} from '../src/index.ts';
import { openLocalChannel } from './local-channel.ts';

interface FakeSession {
  password: string;
  owner: string;
  keys: Buffer[];
  refuse?: ChannelRefused;
}

/** In-test sessions and records of everything the gateway told its dependencies. */
class FakeDeps {
  readonly sessions = new Map<string, FakeSession>();
  readonly logins: LoginAttempt[] = [];
  readonly activity: [string, boolean][] = [];
  readonly opened: ChannelRequest[] = [];
  readonly crowded: string[] = [];
  passwordCalls = 0;
  keyCalls = 0;
  /** How long each login takes to decide. */
  delayMs = 0;
  /** Password logins decided, once their delay is out. */
  passwordsDecided = 0;

  deps(limits: GatewayDeps['limits'], hostKey: Buffer): GatewayDeps {
    return {
      hostKey,
      limits,
      passwordLogin: async (name, password) => {
        this.passwordCalls++;
        await new Promise((r) => setTimeout(r, this.delayMs));
        this.passwordsDecided++;
        const s = this.sessions.get(name);
        if (!s) return { ok: false, user: null, reason: 'noSuchSession' };
        if (s.password !== password) return { ok: false, user: s.owner, reason: 'badPassword' };
        return this.accept(name, s);
      },
      keyLogin: async (name, key) => {
        this.keyCalls++;
        const s = this.sessions.get(name);
        if (!s) return { ok: false, user: null, reason: 'noSuchSession' };
        if (!s.keys.some((k) => k.equals(key.data)))
          return { ok: false, user: null, reason: 'notYours' };
        return this.accept(name, s);
      },
      onLogin: (attempt) => void this.logins.push(attempt),
      open: async (route: SessionRoute, request: ChannelRequest): Promise<Channel> => {
        this.opened.push(request);
        const s = this.sessions.get(route.sessionId);
        if (s?.refuse) throw s.refuse;
        return openLocalChannel(request);
      },
      onActivity: (route, active) => void this.activity.push([route.sessionId, active]),
      onCrowded: (source) => void this.crowded.push(source),
    };
  }

  private accept(name: string, s: FakeSession): LoginDecision {
    return {
      ok: true,
      user: s.owner,
      route: { sessionId: name, workerId: 'w1', runId: `${name}-run` },
    };
  }
}

let dir: string;
let hostKey: Buffer;
let ownerKey: string;
let strangerKey: string;
const blobOf = (pubFile: string) =>
  Buffer.from(readFileSync(pubFile, 'utf8').split(' ')[1]!, 'base64');

function keygen(name: string): string {
  const path = join(dir, name);
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path]);
  return path;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'trainyard-gateway-'));
  hostKey = readFileSync(keygen('host'));
  ownerKey = keygen('owner');
  strangerKey = keygen('stranger');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface SshRun {
  result: Promise<Result>;
  /** What it has printed so far. */
  output(): string;
  write(text: string): void;
  end(): void;
  kill(): void;
}

/** Runs the OpenSSH client (behind sshpass for a password), killed if it outlives `timeoutMs`. */
function ssh(
  port: number,
  args: string[],
  opts: { password?: string; key?: string; method?: string; timeoutMs?: number } = {},
): SshRun {
  const common = [
    ...['-F', '/dev/null', '-p', String(port), '-o', 'StrictHostKeyChecking=no'],
    ...['-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR', '-o', 'ConnectTimeout=5'],
  ];
  const auth = opts.method
    ? ['-o', `PreferredAuthentications=${opts.method}`, '-o', 'NumberOfPasswordPrompts=1']
    : opts.password !== undefined
      ? ['-o', 'PreferredAuthentications=password', '-o', 'NumberOfPasswordPrompts=1']
      : [
          ...['-o', 'PreferredAuthentications=publickey', '-o', 'BatchMode=yes'],
          ...['-o', 'IdentitiesOnly=yes', '-i', opts.key ?? ownerKey],
        ];
  const argv = ['ssh', ...common, ...auth, ...args];
  const [file, ...rest] =
    opts.password !== undefined ? ['sshpass', '-p', opts.password, ...argv] : argv;
  const env = { ...process.env };
  delete env.SSH_AUTH_SOCK;
  const proc = spawn(file!, rest, { env, stdio: 'pipe' });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), opts.timeoutMs ?? 15_000);
  const result = new Promise<Result>((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
  return {
    result,
    output: () => stdout,
    write: (text) => proc.stdin.write(text),
    end: () => proc.stdin.end(),
    kill: () => proc.kill('SIGKILL'),
  };
}

async function until(check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

describe('the SSH gateway', () => {
  const fake = new FakeDeps();
  let gateway: SshGateway;
  let port: number;
  const session = (name: string, extra: Partial<FakeSession> = {}) => {
    fake.sessions.set(name, {
      password: 'otp-right',
      owner: 'ada',
      keys: [blobOf(`${ownerKey}.pub`)],
      ...extra,
    });
    return `${name}@127.0.0.1`;
  };

  beforeAll(async () => {
    gateway = new SshGateway(fake.deps({ failuresPerSource: 100, failuresPerUser: 100 }, hostKey));
    port = await gateway.listen(0, '127.0.0.1');
  });
  afterAll(() => gateway.close());

  it('logs in with the one-time password and returns the command’s exit code', async () => {
    const host = session('s-exit');
    const r = await ssh(port, [host, 'exit 7'], { password: 'otp-right' }).result;
    expect(r.code).toBe(7);
    expect(fake.logins).toContainEqual({
      session: 's-exit',
      user: 'ada',
      method: 'password',
      accepted: true,
      source: '127.0.0.1',
    });
  });

  it('keeps stdout and stderr apart, and passes stdin through to its end', async () => {
    const host = session('s-streams');
    const r = await ssh(port, [host, 'echo out; echo err >&2']).result;
    expect(r).toEqual({ code: 0, stdout: 'out\n', stderr: 'err\n' });
    const run = ssh(port, [host, 'tr a-z A-Z; echo done']);
    run.write('hello gateway\n');
    run.end();
    const piped = await run.result;
    expect(piped.stdout).toBe('HELLO GATEWAY\ndone\n');
  });

  it('logs in with the owner’s key and refuses a key the owner did not register', async () => {
    const host = session('s-keys');
    expect((await ssh(port, [host, 'echo in']).result).stdout).toBe('in\n');
    expect(fake.logins).toContainEqual(
      expect.objectContaining({ session: 's-keys', method: 'publickey', accepted: true }),
    );
    const before = fake.keyCalls;
    const r = await ssh(port, [host, 'echo in'], { key: strangerKey }).result;
    expect(r.code).toBe(255);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/Permission denied/);
    expect(fake.keyCalls).toBeGreaterThan(before);
  });

  it('refuses a registered key whose login was signed by another key', async () => {
    session('s-forged');
    const stranger = ssh2.utils.parseKey(readFileSync(strangerKey)) as ParsedKey;
    const forged = Object.assign(stranger, { getPublicSSH: () => blobOf(`${ownerKey}.pub`) });
    const method: PublicKeyAuthMethod = { type: 'publickey', username: 's-forged', key: forged };
    const client = new ssh2.Client();
    const failed = new Promise<string>((resolve) => {
      client.on('ready', () => resolve('logged in'));
      client.on('error', (err) => resolve(err.message));
    });
    client.connect({
      host: '127.0.0.1',
      port,
      username: 's-forged',
      authHandler: [method],
      readyTimeout: 5_000,
    });
    expect(await failed).toMatch(/authentication methods failed/);
    client.end();
    expect(fake.logins).toContainEqual(
      expect.objectContaining({ session: 's-forged', accepted: false, reason: 'badSignature' }),
    );
  });

  it('refuses a wrong password and reports it', async () => {
    const host = session('s-wrong');
    const r = await ssh(port, [host, 'echo in'], { password: 'otp-wrong' }).result;
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(fake.logins).toContainEqual({
      session: 's-wrong',
      user: 'ada',
      method: 'password',
      accepted: false,
      reason: 'badPassword',
      source: '127.0.0.1',
    });
  });

  it('offers only password and publickey', async () => {
    const host = session('s-methods');
    const calls = fake.passwordCalls + fake.keyCalls;
    const r = await ssh(port, [host, 'true'], { method: 'keyboard-interactive' }).result;
    expect(r.code).toBe(255);
    expect(fake.passwordCalls + fake.keyCalls).toBe(calls);
    expect(r.stderr).toMatch(/Permission denied \(password,publickey\)/);
  });

  it('gives `ssh -tt` a terminal, and a shell that runs what is typed', async () => {
    const host = session('s-pty');
    const tty = await ssh(port, ['-tt', host, 'tty']).result;
    expect(tty.code).toBe(0);
    expect(tty.stdout).toMatch(/\/dev\/pts\/\d+/);
    expect(fake.opened).toContainEqual(
      expect.objectContaining({
        kind: 'exec',
        command: 'tty',
        pty: expect.objectContaining({ cols: 80 }),
      }),
    );

    const shell = ssh(port, ['-tt', host]);
    shell.write('echo $((6*7))\n');
    // What the shell printed, not its echo of what was typed.
    await until(() => /\b42\r?\n/.test(shell.output()));
    shell.write('exit 3\n');
    const r = await shell.result;
    expect(r.code).toBe(3);
  });

  it('serves sftp', async () => {
    const host = session('s-sftp');
    writeFileSync(join(dir, 'weights.bin'), 'w');
    const batch = join(dir, 'batch');
    writeFileSync(batch, `ls ${dir}\n`);
    const args = ['-F', '/dev/null', '-P', String(port), '-o', 'StrictHostKeyChecking=no'];
    const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const proc = spawn('sftp', [
        ...args,
        ...[
          '-o',
          'UserKnownHostsFile=/dev/null',
          '-o',
          'BatchMode=yes',
          '-o',
          'IdentitiesOnly=yes',
        ],
        ...['-i', ownerKey, '-b', batch, host],
      ]);
      let out = '';
      proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
      const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      proc.once('close', (code) => (clearTimeout(timer), resolve({ code, out })));
    });
    expect(r.code).toBe(0);
    expect(r.out).toContain('weights.bin');
  });

  it('forwards `ssh -L` to the session’s loopback, and nowhere else', async () => {
    const host = session('s-forward');
    const http = createHttpServer((_req, res) => res.end('through the tunnel'));
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    const httpPort = (http.address() as AddressInfo).port;
    const [local, elsewhere] = [await freePort(), await freePort()];
    const run = ssh(port, [
      ...['-N', '-o', 'ExitOnForwardFailure=yes'],
      ...['-L', `${local}:localhost:${httpPort}`, '-L', `${elsewhere}:example.com:${httpPort}`],
      host,
    ]);
    try {
      let body = '';
      await until(async () => {
        body = await fetch(`http://127.0.0.1:${local}/`).then(
          (r) => r.text(),
          () => '',
        );
        return body !== '';
      });
      expect(body).toBe('through the tunnel');

      const got = await new Promise<string>((resolve) => {
        const attempt = () => {
          const socket = connect(elsewhere, '127.0.0.1');
          let data = '';
          socket.on('data', (d) => (data += d.toString()));
          socket.on('error', () => setTimeout(attempt, 50));
          socket.on('connect', () => socket.write('GET / HTTP/1.0\r\n\r\n'));
          socket.on('close', (hadError) => hadError || resolve(data));
        };
        attempt();
      });
      expect(got).toBe('');
      expect(fake.opened.filter((r) => r.kind === 'forward')).toHaveLength(1);
    } finally {
      run.kill();
      http.close();
    }
  });

  it('says why when the session refuses the channel, and exits 255', async () => {
    const host = session('s-refused', {
      refuse: new ChannelRefused('notRunning', 'the session is not running'),
    });
    const r = await ssh(port, [host, 'echo in']).result;
    expect(r.code).toBe(255);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('the session is not running');
  });

  it('ends a live ssh when its session is closed, reporting activity on and off', async () => {
    const host = session('s-close');
    const run = ssh(port, [host, 'sleep 30']);
    await until(() => fake.activity.some(([s, on]) => s === 's-close' && on));
    expect(gateway.closeSession('s-close', 'trainyard: the session was stopped')).toBe(1);
    const r = await run.result;
    expect(r.code).toBe(255);
    expect(r.stderr).toContain('the session was stopped');
    await until(() => fake.activity.filter(([s]) => s === 's-close').length === 2);
    expect(fake.activity.filter(([s]) => s === 's-close')).toEqual([
      ['s-close', true],
      ['s-close', false],
    ]);
  });

  it('ends every connection of a user whose account is disabled, and no one else’s', async () => {
    const run = ssh(port, [session('s-ada'), 'sleep 30']);
    const other = ssh(port, [session('s-bob', { owner: 'bob' }), 'sleep 30']);
    await until(() => ['s-ada', 's-bob'].every((id) => fake.activity.some(([s]) => s === id)));
    expect(gateway.closeUser('ada', 'trainyard: your account was disabled.')).toBe(1);
    const r = await run.result;
    expect(r.code).toBe(255);
    expect(r.stderr).toContain('your account was disabled');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(fake.activity.filter(([s]) => s === 's-bob')).toEqual([['s-bob', true]]);
    expect(gateway.closeSession('s-bob', 'trainyard: the session was stopped')).toBe(1);
    expect((await other.result).code).toBe(255);
  });

  it('refuses a login its dependencies let in once the user’s connections were ended', async () => {
    const host = session('s-eve', { owner: 'eve' });
    expect(gateway.closeUser('eve', 'trainyard: your account was disabled.')).toBe(0);
    const r = await ssh(port, [host, 'echo in'], { password: 'otp-right' }).result;
    expect(r.stdout).toBe('');
    expect(fake.logins).toContainEqual({
      session: 's-eve',
      user: 'eve',
      method: 'password',
      accepted: false,
      reason: 'accountDisabled',
      source: '127.0.0.1',
    });
  });
});

/** Logs in with the ssh2 client: whether it got in, or the error it met. */
function login(
  port: number,
  config: Partial<ssh2.ConnectConfig>,
  hangUpAfterMs?: number,
): Promise<'in' | Error> {
  return new Promise((resolve) => {
    const client = new ssh2.Client();
    client.once('ready', () => {
      client.end();
      resolve('in');
    });
    client.once('error', (err) => resolve(err));
    client.once('close', () => resolve(new Error('closed')));
    client.connect({
      host: '127.0.0.1',
      port,
      username: 's-any',
      readyTimeout: 10_000,
      ...config,
      ...(hangUpAfterMs !== undefined && {
        authHandler: (_methods, _partial, next) => {
          setTimeout(() => client.end(), hangUpAfterMs);
          next({ type: 'password', username: String(config.username), password: 'wrong' });
        },
      }),
    });
  });
}

describe('the SSH gateway’s limits', () => {
  it('lives on when a client hangs up while its login is decided, and offers no compression', async () => {
    const fake = new FakeDeps();
    fake.delayMs = 200;
    fake.sessions.set('s-up', { password: 'otp-right', owner: 'ada', keys: [] });
    const gateway = new SshGateway(fake.deps({}, hostKey));
    const port = await gateway.listen(0, '127.0.0.1');
    try {
      const zlib = await login(port, { algorithms: { compress: ['zlib'] }, password: 'x' });
      expect(String(zlib)).toMatch(/compression/i);
      for (let i = 0; i < 3; i++) await login(port, { username: 's-up' }, 10);
      // Each answer comes after its client hung up.
      await until(() => fake.passwordsDecided === 3);
      await until(() => fake.logins.length === 3);
      expect(fake.passwordCalls).toBe(3);
      const r = await ssh(port, ['s-up@127.0.0.1', 'echo in'], { password: 'otp-right' }).result;
      expect(r.stdout).toBe('in\n');
    } finally {
      await gateway.close();
    }
  });

  it('counts logins made side by side from one source as it counts them one after another', async () => {
    const fake = new FakeDeps();
    fake.delayMs = 300;
    fake.sessions.set('s-race', { password: 'otp-right', owner: 'ada', keys: [] });
    const gateway = new SshGateway(
      fake.deps({ failuresPerSource: 3, failuresPerUser: 100 }, hostKey),
    );
    const port = await gateway.listen(0, '127.0.0.1');
    try {
      const guesses = Array.from({ length: 6 }, (_, i) =>
        login(port, { username: 's-race', password: `guess-${i}` }),
      );
      expect((await Promise.all(guesses)).every((r) => r !== 'in')).toBe(true);
      expect(fake.passwordCalls).toBe(3);
      expect(fake.logins).toHaveLength(3);
    } finally {
      await gateway.close();
    }
  });

  it('lets one source have ten connections logging in at once, and drops the eleventh', async () => {
    const fake = new FakeDeps();
    fake.sessions.set('s-many', { password: 'otp-right', owner: 'ada', keys: [] });
    const gateway = new SshGateway(fake.deps({}, hostKey));
    const port = await gateway.listen(0, '127.0.0.1');
    const idle = Array.from({ length: 10 }, () => connect(port, '127.0.0.1'));
    try {
      // The gateway's greeting: each was let in.
      await Promise.all(idle.map((s) => once(s, 'data')));
      const eleventh = connect(port, '127.0.0.1');
      eleventh.on('error', () => {});
      const started = Date.now();
      await once(eleventh, 'close');
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(fake.crowded).toEqual(['127.0.0.1']);
      expect(idle.every((s) => !s.destroyed)).toBe(true);
      for (const s of idle) s.destroy();
      // Let in again once the gateway has seen them go.
      await until(
        async () => (await login(port, { username: 's-many', password: 'otp-right' })) === 'in',
      );
    } finally {
      for (const s of idle) s.destroy();
      await gateway.close();
    }
  });

  it('refuses a name longer than any unasked, and reports it cut short', async () => {
    const fake = new FakeDeps();
    const gateway = new SshGateway(fake.deps({}, hostKey));
    const port = await gateway.listen(0, '127.0.0.1');
    try {
      const name = 's'.repeat(5_000);
      expect(await login(port, { username: name, password: 'x' })).not.toBe('in');
      expect(fake.passwordCalls).toBe(0);
      expect(fake.logins).toEqual([
        {
          session: `${'s'.repeat(128)}…`,
          user: null,
          method: 'password',
          accepted: false,
          reason: 'noSuchSession',
          source: '127.0.0.1',
        },
      ]);
    } finally {
      await gateway.close();
    }
  });

  it('refuses every login from a source once its failures are used up, without asking', async () => {
    const fake = new FakeDeps();
    fake.sessions.set('s-guess', { password: 'otp-right', owner: 'ada', keys: [] });
    const gateway = new SshGateway(
      fake.deps({ failuresPerSource: 3, failuresPerUser: 100 }, hostKey),
    );
    const port = await gateway.listen(0, '127.0.0.1');
    try {
      for (let i = 0; i < 3; i++) {
        await ssh(port, ['s-guess@127.0.0.1', 'true'], { password: `guess-${i}` }).result;
      }
      expect(fake.passwordCalls).toBe(3);
      const r = await ssh(port, ['s-guess@127.0.0.1', 'echo in'], { password: 'otp-right' }).result;
      expect(r.code).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(fake.passwordCalls).toBe(3);
      // The refusals past the limit are not recorded: a flood of them must not flood the log.
      expect(fake.logins.map((l) => l.reason)).toEqual([
        'badPassword',
        'badPassword',
        'badPassword',
      ]);
    } finally {
      await gateway.close();
    }
  });

  it('refuses passwords for a session name others failed against, but still lets its owner’s key in', async () => {
    const fake = new FakeDeps();
    fake.sessions.set('s-target', {
      password: 'otp-right',
      owner: 'ada',
      keys: [blobOf(`${ownerKey}.pub`)],
    });
    const gateway = new SshGateway(
      fake.deps({ failuresPerSource: 100, failuresPerUser: 3 }, hostKey),
    );
    const port = await gateway.listen(0, '127.0.0.1');
    try {
      for (let i = 0; i < 3; i++) {
        await ssh(port, ['s-target@127.0.0.1', 'true'], { password: `guess-${i}` }).result;
      }
      const guessed = await ssh(port, ['s-target@127.0.0.1', 'echo in'], {
        password: 'otp-right',
      }).result;
      expect(guessed.stdout).toBe('');
      expect(fake.passwordCalls).toBe(3);
      const owner = await ssh(port, ['s-target@127.0.0.1', 'echo in']).result;
      expect(owner.code, owner.stderr).toBe(0);
      expect(owner.stdout).toBe('in\n');
    } finally {
      await gateway.close();
    }
  });

  it('drops a connection that does not log in in time', async () => {
    const gateway = new SshGateway(new FakeDeps().deps({ authTimeoutMs: 300 }, hostKey));
    const port = await gateway.listen(0, '127.0.0.1');
    try {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      socket.resume();
      const started = Date.now();
      await once(socket, 'close');
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    } finally {
      await gateway.close();
    }
  });
});
