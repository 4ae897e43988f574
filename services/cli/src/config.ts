import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { CliError } from './errors.ts';

/** What `trainyard up` writes so that other commands on this machine can find the stack. */
export interface StackInfo {
  apiUrl: string;
  natsUrl: string;
  databaseUrl: string;
  /** The public key that signs the stack's events, which `events verify` trusts. */
  publicKey?: string;
  /** The embedded NATS requires TLS; local commands reach it on loopback. */
  natsTls?: boolean;
  /** Where jobs' containers run and their images are kept, when the stack runs containers. */
  dockerHost?: string;
  registry?: string;
  pid: number;
  home: string;
}

/** `$XDG_CONFIG_HOME/trainyard`, else `~/.config/trainyard`: saved logins. */
export const configDir = (env = process.env) =>
  join(env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'trainyard');

/** `$XDG_STATE_HOME/trainyard`, else `~/.local/state/trainyard`: where the local stack runs. */
export const stateDir = (env = process.env) =>
  join(env.XDG_STATE_HOME || join(homedir(), '.local', 'state'), 'trainyard');

export const homeDirOf = (env = process.env) => resolve(env.TRAINYARD_HOME ?? '.trainyard');
export const stackFile = (env = process.env) => join(homeDirOf(env), 'stack.json');
/** The latest stack this user started, wherever it was started from. */
export const userStackFile = (env = process.env) => join(stateDir(env), 'stack.json');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM';
  }
}

export function readJson<T>(file: string): T | null {
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

/**
 * The running embedded stack: the one in `TRAINYARD_HOME` when that is set; else the one in
 * `./.trainyard`, else the latest one this user started. Only a stack whose process still runs.
 */
export function readStack(env = process.env): StackInfo | null {
  const candidates = env.TRAINYARD_HOME ? [stackFile(env)] : [stackFile(env), userStackFile(env)];
  for (const file of candidates) {
    const info = readJson<StackInfo>(file);
    if (info && Number.isInteger(info.pid) && alive(info.pid)) return info;
  }
  return null;
}

/** Where a stack keeps the private key that signs its events (0600, in a 0700 directory). */
export const signingKeyFile = (home: string) => join(home, 'secrets', 'signing.json');

/** The signing key a stack keeps in `home`, base64 PKCS#8; undefined when there is none. */
export function readSigningKey(home: string): string | undefined {
  return readJson<{ privateKey?: string }>(signingKeyFile(home))?.privateKey || undefined;
}

/** Writes a file readable by its owner only, whole or not at all. */
export async function writePrivate(file: string, content: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, content, { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, file);
}

export interface CliCredentials {
  apiUrl: string;
  token: string;
  username: string;
  /** When `token` stops working; `refreshToken` gets the next one. */
  expiresAt?: string;
  refreshToken?: string;
}

interface CredentialsFile {
  profiles: Record<string, CliCredentials>;
}

export const credentialsFile = (env = process.env) =>
  env.TRAINYARD_CREDENTIALS ?? join(configDir(env), 'credentials.json');

/** The profile in use: `--profile`, `TRAINYARD_PROFILE`, or `default`. */
export function profileName(env = process.env): string {
  const name = env.TRAINYARD_PROFILE || 'default';
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name))
    throw new CliError(`profile names hold letters, digits, _, . and - only: "${name}"`);
  return name;
}

function readCredentialsFile(env = process.env): CredentialsFile {
  const raw = readJson<CredentialsFile | CliCredentials>(credentialsFile(env));
  if (!raw) return { profiles: {} };
  if ('profiles' in raw && raw.profiles) return raw;
  if ('token' in raw) return { profiles: { default: raw } };
  return { profiles: {} };
}

export function readCredentials(env = process.env): CliCredentials | null {
  return readCredentialsFile(env).profiles[profileName(env)] ?? null;
}

export async function writeCredentials(creds: CliCredentials, env = process.env): Promise<void> {
  const file = readCredentialsFile(env);
  file.profiles[profileName(env)] = creds;
  await writePrivate(credentialsFile(env), JSON.stringify(file, null, 2));
}

/** Forgets the profile's login; returns what it held, or null when there was none. */
export async function removeCredentials(env = process.env): Promise<CliCredentials | null> {
  const file = readCredentialsFile(env);
  const name = profileName(env);
  const had = file.profiles[name] ?? null;
  if (!had) return null;
  delete file.profiles[name];
  await writePrivate(credentialsFile(env), JSON.stringify(file, null, 2));
  return had;
}

/**
 * The API to talk to: `--api` (or `TRAINYARD_API_URL`), the profile's saved login, the local
 * stack, or the default.
 */
export function apiUrl(explicit?: string, env = process.env): string {
  return (
    explicit ??
    env.TRAINYARD_API_URL ??
    readCredentials(env)?.apiUrl ??
    readStack(env)?.apiUrl ??
    `http://127.0.0.1:${env.TRAINYARD_PORT ?? '8080'}`
  ).replace(/\/$/, '');
}
