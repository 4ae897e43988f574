import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitFor } from '@trainyard/testkit';
import type { TestStack } from './harness.ts';

/** What `POST /v1/sessions/:id/connect` answers. */
export interface Connect {
  host: string;
  port: number;
  username: string;
  password: string;
  expiresAt: string;
  hostKey: string;
  hostKeyFingerprint: string;
}

export interface SessionView {
  id: string;
  status: string;
  stopReason?: string | null;
  requeuedBecause?: string | null;
  workerId?: string | null;
  runs?: number;
  image?: string | null;
  fromJob?: string | null;
  imageDigest?: string | null;
  failure?: { kind: string; reason: string; message: string } | null;
}

/** What a finished `ssh`, `scp` or `sftp` left: its exit status and output. */
export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a program to its end (or `timeoutMs`), keeping its output apart. */
export function run(
  file: string,
  args: string[],
  opts: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<Ran> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      {
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, ...opts.env },
      },
      (err, stdout, stderr) =>
        resolve({
          code: err ? (typeof err.code === 'number' ? err.code : null) : 0,
          stdout,
          stderr,
        }),
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/** An OpenSSH client set up for one session: its known-hosts file pins the gateway's key. */
export class SshClient {
  constructor(
    readonly dir: string,
    readonly port: number,
    readonly user: string,
  ) {}

  static async forSession(dir: string, connect: Connect): Promise<SshClient> {
    await writeFile(
      join(dir, 'known_hosts'),
      `[${connect.host}]:${connect.port} ${connect.hostKey}\n`,
    );
    return new SshClient(dir, connect.port, connect.username);
  }

  /** Options every client takes: no user config, the pinned host key, no agent. */
  options(auth: { password?: true; key?: string }): string[] {
    return [
      '-F',
      '/dev/null',
      '-o',
      `UserKnownHostsFile=${join(this.dir, 'known_hosts')}`,
      '-o',
      'StrictHostKeyChecking=yes',
      '-o',
      'LogLevel=ERROR',
      '-o',
      'IdentityAgent=none',
      '-o',
      'ConnectTimeout=10',
      ...(auth.key
        ? [
            '-o',
            'PreferredAuthentications=publickey',
            '-o',
            'IdentitiesOnly=yes',
            '-i',
            auth.key,
            '-o',
            'BatchMode=yes',
          ]
        : ['-o', 'PreferredAuthentications=password', '-o', 'PubkeyAuthentication=no']),
    ];
  }

  /** `ssh user@host CMD`, logged in with a password or a key. */
  ssh(
    command: string,
    auth: { password?: string; key?: string },
    opts: { input?: string; timeoutMs?: number } = {},
  ): Promise<Ran> {
    const args = [
      ...this.options({
        ...(auth.key && { key: auth.key }),
        ...(auth.password && { password: true }),
      }),
      '-p',
      String(this.port),
      `${this.user}@127.0.0.1`,
      command,
    ];
    return auth.password
      ? run('sshpass', ['-p', auth.password, 'ssh', ...args], opts)
      : run('ssh', args, opts);
  }

  /** `scp` with a key, to or from the session (`:path` names a path in it). */
  scp(from: string, to: string, key: string): Promise<Ran> {
    const remote = (p: string) => (p.startsWith(':') ? `${this.user}@127.0.0.1${p}` : p);
    return run(
      'scp',
      [...this.options({ key }), '-P', String(this.port), remote(from), remote(to)],
      {
        timeoutMs: 120_000,
      },
    );
  }

  /** `sftp -b` with a key: runs a batch of sftp commands. */
  async sftp(batch: string[], key: string): Promise<Ran> {
    const file = join(this.dir, 'batch');
    await writeFile(file, `${batch.join('\n')}\n`);
    return run(
      'sftp',
      [...this.options({ key }), '-P', String(this.port), '-b', file, `${this.user}@127.0.0.1`],
      {
        timeoutMs: 120_000,
      },
    );
  }

  /** A long-running `ssh` (a forward, a shell): the caller ends it. */
  spawn(extra: string[], key: string, command?: string): ChildProcess {
    return spawn(
      'ssh',
      [
        ...this.options({ key }),
        '-p',
        String(this.port),
        ...extra,
        `${this.user}@127.0.0.1`,
        ...(command ? [command] : []),
      ],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
  }
}

/** Asks the API for a session and waits for it to run. */
export async function runningSession(
  t: TestStack,
  token: string,
  body: object = { resources: { gpus: 0 } },
): Promise<SessionView> {
  const res = await t.http('/v1/sessions', {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 202) throw new Error(`session create: ${res.status} ${await res.text()}`);
  const { id } = (await res.json()) as { id: string };
  return waitForSession(t, token, id, (s) => s.status === 'running');
}

export async function waitForSession(
  t: TestStack,
  token: string,
  id: string,
  done: (s: SessionView) => boolean,
  timeoutMs = 20_000,
): Promise<SessionView> {
  let seen = 'nothing';
  try {
    return await waitFor(
      `session ${id}`,
      async () => {
        const res = await t.http(`/v1/sessions/${id}`, { token });
        if (!res.ok) return undefined;
        const session = (await res.json()) as SessionView;
        seen = JSON.stringify(session);
        return done(session) ? session : undefined;
      },
      { timeoutMs, intervalMs: 100 },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last seen ${seen}`, { cause: err });
  }
}

/** A fresh one-time password for a session (or for a shell beside a job). */
export async function connect(
  t: TestStack,
  token: string,
  id: string,
  kind: 'sessions' | 'jobs' = 'sessions',
): Promise<Connect> {
  const res = await t.http(`/v1/${kind}/${id}/connect`, { method: 'POST', token });
  if (res.status !== 200) throw new Error(`connect: ${res.status} ${await res.text()}`);
  return (await res.json()) as Connect;
}

/**
 * Makes a key pair at `file` (`file.pub` beside it) with ssh-keygen; the fingerprint
 * `ssh-keygen -l` prints for it.
 */
export function sshKeygen(
  file: string,
  type: string,
  opts: { bits?: number; comment?: string } = {},
): string {
  execFileSync('ssh-keygen', [
    '-q',
    '-t',
    type,
    ...(opts.bits ? ['-b', String(opts.bits)] : []),
    '-N',
    '',
    '-C',
    opts.comment ?? 'test',
    '-f',
    file,
  ]);
  return execFileSync('ssh-keygen', ['-lf', `${file}.pub`], { encoding: 'utf8' }).split(' ')[1]!;
}

/** Makes an ed25519 key pair in `dir`; registers its public half for the token's user. */
export async function registeredKey(
  t: TestStack,
  token: string,
  dir: string,
  name: string,
): Promise<string> {
  const key = join(dir, name);
  sshKeygen(key, 'ed25519', { comment: name });
  const res = await t.http('/v1/me/ssh-keys', {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ publicKey: (await readFile(`${key}.pub`, 'utf8')).trim() }),
  });
  if (res.status !== 201 && res.status !== 200)
    throw new Error(`add key: ${res.status} ${await res.text()}`);
  return key;
}
