import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod } from 'node:fs/promises';
import { constants } from 'node:os';
import { join } from 'node:path';
import { configDir, writePrivate } from './config.ts';
import { CliError } from './errors.ts';

/**
 * The system `ssh`, pointed at a session through the gateway: the gateway's host key pinned in
 * a known_hosts file of the CLI's own (so the first connection cannot be intercepted and the
 * user's own known_hosts is left alone), and the one-time password given by `SSH_ASKPASS`.
 */

/** Where the gateway's host key is pinned. */
export const knownHostsFile = (env = process.env) => join(configDir(env), 'known_hosts');
/** The script `ssh` runs to ask for a password: this CLI's hidden `askpass` command. */
export const askpassFile = (env = process.env) => join(configDir(env), 'askpass');
/** What `ssh-config --write` writes, for `Include` in `~/.ssh/config`. */
export const sshConfigFile = (env = process.env) => join(configDir(env), 'ssh_config');

/** The variable the one-time password reaches the askpass command in. */
export const PASSWORD_VARIABLE = 'TRAINYARD_SSH_PASSWORD';

/** Where the gateway listens and the host key it shows, as the API says. */
export interface GatewayInfo {
  host: string;
  port: number;
  hostKey: string;
}

const HOST = /^[A-Za-z0-9._:-]{1,253}$/;
const KEY = /^([a-z0-9@.-]{1,64}) ([A-Za-z0-9+/]+={0,2})(?: .*)?$/;

/**
 * The gateway as the API described it, checked: these go into files that `ssh` reads, where a
 * stray newline or space would add lines of its own.
 */
export function checkedGateway(g: GatewayInfo): GatewayInfo & { pattern: string } {
  const key = KEY.exec(g.hostKey.trim());
  if (!HOST.test(g.host) || !Number.isInteger(g.port) || !key) {
    throw new CliError(
      'the API described the SSH gateway in a form ssh cannot take (host, port or host key)',
      'BAD_GATEWAY_INFO',
    );
  }
  const pattern = g.port === 22 ? g.host : `[${g.host}]:${g.port}`;
  return { host: g.host, port: g.port, hostKey: `${key[1]} ${key[2]}`, pattern };
}

/** Pins the gateway's host key for its `[host]:port`, replacing what was pinned there before. */
export async function pinHostKey(g: GatewayInfo, env = process.env): Promise<string> {
  const { pattern, hostKey } = checkedGateway(g);
  const file = knownHostsFile(env);
  const kept = existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l.trim() !== '' && l.split(' ')[0] !== pattern)
    : [];
  await writePrivate(file, [...kept, `${pattern} ${hostKey}`].join('\n') + '\n');
  return file;
}

const shellQuote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** Writes the askpass script: it runs this very CLI, as `trainyard askpass`. */
export async function writeAskpass(env = process.env): Promise<string> {
  const file = askpassFile(env);
  const self = [process.execPath, ...process.execArgv, process.argv[1] ?? '']
    .map(shellQuote)
    .join(' ');
  await writePrivate(file, `#!/bin/sh\nexec ${self} askpass "$@"\n`);
  await chmod(file, 0o700);
  return file;
}

/**
 * What `trainyard askpass` prints for a prompt of `ssh`: the one-time password when it asks for
 * a password, nothing (and a failure, so that `ssh` moves on) when it asks for anything else,
 * such as the passphrase of a key.
 */
export function askpassAnswer(prompt: string, env = process.env): string | null {
  const password = env[PASSWORD_VARIABLE];
  if (!password || (prompt !== '' && !/password/i.test(prompt))) return null;
  return password;
}

/** The exit status of a process that ended by `signal`, as a shell gives it. */
const signalStatus = (signal: NodeJS.Signals) =>
  128 + ((constants.signals as Record<string, number>)[signal] ?? 0);

/**
 * Runs `ssh` to a session, with the terminal handed to it, and resolves with its exit status.
 * A registered key is tried first; the one-time password is the fallback.
 */
export async function runSsh(opts: {
  gateway: GatewayInfo;
  username: string;
  password: string;
  command: string[];
  /** More of `ssh`'s options, before the destination (`-N`, `-L …`). */
  options?: string[];
  env?: NodeJS.ProcessEnv;
  /** Ends `ssh` (SIGTERM) when aborted. */
  signal?: AbortSignal;
}): Promise<number> {
  const env = opts.env ?? process.env;
  const gateway = checkedGateway(opts.gateway);
  const known = await pinHostKey(gateway, env);
  const askpass = await writeAskpass(env);
  const args = [
    '-p',
    String(gateway.port),
    '-o',
    `UserKnownHostsFile=${known}`,
    '-o',
    'StrictHostKeyChecking=yes',
    '-o',
    'PreferredAuthentications=publickey,password',
    ...(opts.options ?? []),
    `${opts.username}@${gateway.host}`,
    ...opts.command,
  ];
  const child = spawn('ssh', args, {
    stdio: 'inherit',
    env: {
      ...env,
      SSH_ASKPASS: askpass,
      SSH_ASKPASS_REQUIRE: 'force',
      [PASSWORD_VARIABLE]: opts.password,
    },
  });
  // The terminal's Ctrl-C is for ssh (and the session), not for this wrapper.
  const ignore = () => undefined;
  process.on('SIGINT', ignore);
  const end = () => child.kill('SIGTERM');
  opts.signal?.addEventListener('abort', end, { once: true });
  try {
    return await new Promise<number>((resolve, reject) => {
      child.once('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'ENOENT'
            ? new CliError(
                'the ssh client is not installed: install OpenSSH (on Debian: apt install openssh-client)',
                'NO_SSH',
              )
            : err,
        ),
      );
      child.once('exit', (code, signal) => resolve(code ?? (signal ? signalStatus(signal) : 255)));
    });
  } finally {
    process.off('SIGINT', ignore);
    opts.signal?.removeEventListener('abort', end);
  }
}

/** A running session as `ssh-config` names it. */
export interface ConfigHost {
  id: string;
  name: string | null;
}

const ALIAS = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const quoteConfig = (s: string) => (/[\s"]/.test(s) ? `"${s.replaceAll('"', '')}"` : s);

/**
 * `Host` entries for running sessions, each known by its id and, where its name makes a host
 * alias and no newer session took it, by its name.
 */
export function sshConfigText(
  hosts: ConfigHost[],
  gateway: GatewayInfo,
  knownHosts: string,
  source: string,
): string {
  const g = checkedGateway(gateway);
  const taken = new Set<string>();
  const blocks = hosts.map((h) => {
    const aliases = [h.id];
    if (h.name && ALIAS.test(h.name) && !taken.has(h.name) && h.name !== h.id) {
      taken.add(h.name);
      aliases.unshift(h.name);
    }
    return [
      `Host ${aliases.join(' ')}`,
      `  HostName ${g.host}`,
      `  Port ${g.port}`,
      `  User ${h.id}`,
      `  UserKnownHostsFile ${quoteConfig(knownHosts)}`,
      '  StrictHostKeyChecking yes',
      '  PreferredAuthentications publickey',
    ].join('\n');
  });
  const header = `# Your running Trainyard sessions at ${source}, written by \`trainyard ssh-config\`.\n# Log in with a key registered by \`trainyard ssh-key add\`.\n`;
  return [header, ...blocks].join('\n') + '\n';
}
